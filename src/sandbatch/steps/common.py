"""What every per-rollout step shares: arguments, paths, and the failure policy.

Failure policy: a UserError is printed as one line (exit 2, nothing written). An
InfraError exits 1 while Snakemake has attempts left, so it retries the job; on the last
attempt the step writes its record with status `infra_error` and exits 0, so the
aggregate still runs and reports it apart. Agent outcomes are records, never exceptions.
"""

from __future__ import annotations

import abc
import argparse
import asyncio
import contextlib
import signal
import sys
import time
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Callable

from .. import trace
from ..core.config import Config, Timeouts
from ..core.errors import InfraError, UserError
from ..contracts.files import attempt_log
from ..contracts.records import now
from ..sandbox import Provider, Sandbox, get_provider
from ..tasks import Task, get_task
from ..core import killpoint
from .recovery import Recovery

# Called once a step's outputs are written and only deletes are left: the step server sets
# it to report the step done at once, so the rollout's next job starts while the sandbox
# is being deleted. A step in its own process (no server, Slurm) deletes before it exits.
outputs_done: Callable[[], None] | None = None


@dataclass
class StepContext:
    config_path: Path
    task_id: str
    repeat: int
    attempt: int
    max_attempts: int

    @cached_property
    def cfg(self) -> Config:
        try:
            text = self.config_path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UserError(f"--config {self.config_path}: {exc.strerror}; pass the run's settings file, "
                            "results/<run>/_settings/run.json (the workflow writes it)") from None
        return Config.model_validate_json(text)

    @cached_property
    def provider(self) -> Provider:
        """One provider (one set of client connections) per step process; its creates are
        admitted by the run's shared bucket (sandbox.create_rate)."""
        from ..sandbox.admission import admission_for

        provider = get_provider(self.cfg.sandbox)
        provider.admission = admission_for(self.cfg.run_dir, self.cfg.sandbox.create_rate)
        return provider

    async def aclose(self) -> None:
        if "provider" in self.__dict__:
            await self.__dict__.pop("provider").aclose()  # a later step on this context makes a new one

    @cached_property
    def task(self) -> Task:
        return get_task(self.cfg.benchmark, self.task_id)

    @cached_property
    def timeouts(self) -> Timeouts:
        """The config's per-phase limits with the task's own (Terminal-Bench task.toml) applied."""
        from ..tasks.settings import timeouts_for

        return timeouts_for(self.cfg, self.task)

    @property
    def dir(self) -> Path:
        return self.cfg.run_dir / self.task_id / str(self.repeat)

    def path(self, name: str) -> Path:
        return self.dir / name

    @property
    def last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    def scaled(self, seconds: float) -> float:
        """Infra-phase timeouts grow with the attempt number (a slow pull gets more time)."""
        return seconds * self.attempt


class Step(abc.ABC):
    """Subclasses implement `run` (write the outputs) and `fail` (write failure outputs)."""

    name = "step"
    # Steps after the agent retry inside their own process: on Slurm a rollout's steps run
    # as one group job, and a failed job there reruns the whole group, the agent included.
    retry_in_process = False

    def __init__(self, ctx: StepContext):
        self.ctx = ctx
        self.started_at = now()
        self.t0 = time.monotonic()
        self.phases: dict[str, float] = {}
        self.to_delete: list[Sandbox] = []
        self.recovery = Recovery(ctx, self.name)  # what its rerun after a kill -9 needs (steps.recovery)

    @abc.abstractmethod
    async def run(self) -> None:
        """Write the step's outputs; raise InfraError for infrastructure failures."""

    @abc.abstractmethod
    def fail(self, exc: InfraError) -> None:
        """After the last attempt: write the outputs as an infra_error record."""

    def delete_later(self, sandbox: Sandbox) -> None:
        """Delete `sandbox` when the step ends, after its outputs are written (also when it
        fails); a delete that fails then is logged and left to the run's end (reap_run)."""
        self.to_delete.append(sandbox)

    async def _delete_pending(self, reported: bool) -> None:
        while self.to_delete:
            sandbox = self.to_delete.pop()
            t0 = time.monotonic()
            try:
                await asyncio.shield(sandbox.delete())
            except Exception as exc:
                print(f"sandbatch: {self.name}: deleting sandbox {sandbox.id} failed (the run's end deletes it): "
                      f"{exc}", file=sys.stderr)
            else:
                killpoint.reached("deleted")
                if reported:
                    print(f"sandbatch: {self.name}: deleted sandbox {sandbox.id} in {time.monotonic() - t0:.2f} s "
                          f"after the step was reported done", file=sys.stderr)

    def stamp(self, rec):
        rec.started_at, rec.finished_at = self.started_at, now()
        rec.duration_s = round(time.monotonic() - self.t0, 3)
        rec.phases = {name: round(s, 3) for name, s in self.phases.items()}
        rec.attempt = self.ctx.attempt
        return rec


@contextlib.contextmanager
def timed(phases: dict[str, float] | None, name: str):
    """Add the seconds the block takes to phases[name] (records show where a step's time went)."""
    t0 = time.monotonic()
    try:
        yield
    finally:
        if phases is not None:
            phases[name] = phases.get(name, 0.0) + time.monotonic() - t0


def parse_args(argv: list[str] | None = None) -> StepContext:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True, type=Path, help="the run's validated config (JSON)")
    p.add_argument("--task", required=True)
    p.add_argument("--repeat", required=True, type=int)
    p.add_argument("--attempt", type=int, default=1)
    p.add_argument("--max-attempts", type=int, default=1)
    a = p.parse_args(argv)
    return StepContext(a.config, a.task, a.repeat, a.attempt, a.max_attempts)


async def run_step(step: Step) -> None:
    """The whole step, as a job runs it: run(), then the deletes it deferred. SIGTERM/SIGINT
    cancel it, so its `finally` blocks delete what it created."""
    task = asyncio.ensure_future(step.run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    reported = False
    try:
        await task
        if step.to_delete and outputs_done is not None:
            outputs_done()
            reported = True
    finally:
        try:
            await step._delete_pending(reported)
        finally:
            await step.ctx.aclose()


def main(step_cls: Callable[[StepContext], Step], argv: list[str] | None = None) -> int:
    ctx = parse_args(argv)
    while True:
        step = step_cls(ctx)
        killpoint.step = step.name
        label = f"{step.name} {ctx.task_id}/{ctx.repeat} (attempt {ctx.attempt}/{ctx.max_attempts})"
        try:
            with trace.step(ctx, step.name):
                asyncio.run(run_step(step))
            return 0
        except UserError as exc:
            print(f"sandbatch: error: {exc}", file=sys.stderr)
            return 2
        except asyncio.CancelledError:
            print(f"sandbatch: {label}: stopped by a signal", file=sys.stderr)
            return 143
        except InfraError as exc:
            print(f"sandbatch: {label}: infra error [{exc.failure_class}]: {exc}", file=sys.stderr)
            if ctx.last_attempt or exc.final:
                step.fail(exc)
                return 0
            if not step.retry_in_process:
                _keep_reason(ctx, step.name, f"sandbatch: {label}: infra error [{exc.failure_class}]: {exc}")
                return 1  # Snakemake retries the job
            ctx = replace(ctx, attempt=ctx.attempt + 1)


def _keep_reason(ctx: StepContext, step: str, line: str) -> None:
    with contextlib.suppress(OSError):  # the console's copy: the step's own log has the line too
        attempt_log(ctx.dir / "logs" / f"{step}.log", ctx.attempt).write_text(line + "\n", encoding="utf-8")
