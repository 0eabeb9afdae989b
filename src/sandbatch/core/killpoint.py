"""Deterministic kill points, for testing that every step is safe to rerun after `kill -9`.

Steps call `reached(point)` right after each side effect, or decorate the method that has it
with `after(point)`: a sandbox created, prepared or deleted, a command run, a file written
(`sandbatch.core.util.write_atomic` calls it with `wrote-<file name>`). Unless the environment
asks for it, that is one dictionary lookup.

    SANDBATCH_KILL_AT=patch:wrote-patch.json[,grade:deleted...]   # <step>:<point>, or <step>:*
    SANDBATCH_KILL_MODE=step | group    # SIGKILL this step's process (default), or its whole
                                        # process group: Snakemake, the step server, every job
    SANDBATCH_KILL_FIRED=DIR            # each point fires once: a file per fired point in DIR
    SANDBATCH_KILL_TRACE=FILE           # append every point reached, one `<step>:<point>` a line

The variables reach a step through Snakemake's job environment; the step server's fork takes
its client's environment (sandbatch.steps.forkserver), so "this step's process" is the forked
child that runs the step. Without SANDBATCH_KILL_FIRED a point fires every time it is reached.
"""

from __future__ import annotations

import functools
import os
import signal
from typing import Any, Awaitable, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

AT = "SANDBATCH_KILL_AT"
MODE = "SANDBATCH_KILL_MODE"
FIRED = "SANDBATCH_KILL_FIRED"
TRACE = "SANDBATCH_KILL_TRACE"

step: str | None = None  # the running step's name (set by sandbatch.steps.common.main)


def reached(point: str) -> None:
    """Kill this process (or its group) here if SANDBATCH_KILL_AT names `<step>:<point>`."""
    wanted = os.environ.get(AT)
    trace = os.environ.get(TRACE)
    if (wanted or trace) and step is not None:
        if trace:
            with open(trace, "a", encoding="utf-8") as fh:
                fh.write(f"{step}:{point}\n")
        if wanted:
            _maybe_kill(wanted, f"{step}:{point}")


def _maybe_kill(wanted: str, here: str) -> None:
    names = {w.strip() for w in wanted.split(",")}
    if here not in names and f"{here.partition(':')[0]}:*" not in names:
        return
    fired = os.environ.get(FIRED)
    if fired:
        os.makedirs(fired, exist_ok=True)
        try:  # O_EXCL: of concurrent steps reaching the point, one fires
            os.close(os.open(os.path.join(fired, here.replace("/", "_")), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    group = os.environ.get(MODE, "step") == "group"
    os.write(2, f"sandbatch: kill point {here}: SIGKILL to the {'process group' if group else 'step'}\n".encode())
    if group:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def after(point: str) -> Callable[[F], F]:
    """Decorate a coroutine function: `point` is reached when it returns (not when it raises)."""
    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        async def run(*args: Any, **kwargs: Any) -> Any:
            result = await fn(*args, **kwargs)
            reached(point)
            return result
        return run  # type: ignore[return-value]
    return decorate
