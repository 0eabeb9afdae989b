"""mini-swe-agent's environment over the sandbox API: the agent loop runs on this host.

mini's agent loop is synchronous; it runs on a worker thread of the harness step while
the step's event loop (the model proxy, the sandbox clients) keeps running. Each command
the agent issues is handed back to that loop and runs through `Sandbox.exec` in the
task's workdir, so task images need no Python and sandboxes no route to the model.
The semantics are those of mini's `LocalEnvironment`: bash, stderr merged into the
output, a per-command timeout reported as an exception (return code -1) with the output
so far, and `Submitted` when the first output line is the submit marker and the command
exited 0. The output limit is mini's own (the model's observation template).

mini and its model client (litellm: ~2 CPU-s to import) are imported here, at the top: the
step server imports this module once per run (`MiniSweAgentHarness.host_modules`), calls
`warm_up`, and forks every harness step from it. That is safe: importing them starts no
thread and opens no connection (tests/test_harness_mini_swe_agent.py forks after both and
calls the model from many children at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import importlib
import os
import sys
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel

# read when they are imported: no cost map fetched from the internet, no banner
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")

from minisweagent.agents import get_agent  # noqa: E402
from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.config import get_config_from_spec, get_config_path  # noqa: E402
from minisweagent.exceptions import Submitted  # noqa: E402
import litellm  # noqa: E402
from minisweagent.models.litellm_model import LitellmModel  # noqa: E402

litellm.suppress_debug_info = True  # no "Provider List" banner on stdout for every unpriced model call

from ..core.errors import UserError  # noqa: E402
from ..sandbox import Sandbox  # noqa: E402
from .base import native_config  # noqa: E402
from .mini_defaults import BASE_CONFIG  # noqa: E402

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


class SandboxEnvironmentConfig(BaseModel):
    cwd: str = ""
    env: dict[str, str] = {}
    timeout: int = 30


class Stopped(Exception):
    """The harness step stopped the agent (its wall-clock limit passed)."""


class SandboxEnvironment:
    """mini's Environment protocol (`config`, `execute`, `get_template_vars`, `serialize`)."""

    def __init__(self, sandbox: Sandbox, loop: asyncio.AbstractEventLoop, *, uname: dict[str, str] | None = None,
                 base_env: dict[str, str] | None = None, **kwargs: Any):
        self.config = SandboxEnvironmentConfig(**kwargs)
        self.sandbox, self._loop = sandbox, loop
        self._uname = dict(uname or {})
        self._base_env = dict(base_env or {})
        self.stop = threading.Event()

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        if self.stop.is_set():
            raise Stopped("the harness step's time for the agent is up")
        command = action.get("command", "")
        limit = timeout or self.config.timeout
        run = self.sandbox.exec("exec 2>&1\n" + command, timeout=limit, cwd=cwd or self.config.cwd or None,
                                env={**self._base_env, **self.config.env})
        # an infrastructure failure (sandbox gone) propagates: it is no command output
        res = asyncio.run_coroutine_threadsafe(run, self._loop).result()
        output = res.stdout + res.stderr
        if res.timed_out:
            return {"output": output, "returncode": -1,
                    "exception_info": f"An error occurred while executing the command: "
                                      f"Command '{command}' timed out after {limit} seconds",
                    "extra": {"exception_type": "TimeoutExpired"}}
        result = {"output": output, "returncode": res.exit_code, "exception_info": ""}
        lines = output.lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_MARKER and res.exit_code == 0:
            submission = "".join(lines[1:])
            raise Submitted({"role": "exit", "content": submission,
                             "extra": {"exit_status": "Submitted", "submission": submission}})
        return result

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        # the sandbox's uname (mini's templates name system/release/version/machine), not this host's
        return {**self.config.model_dump(), **self._uname, **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {"info": {"config": {"environment": self.config.model_dump(mode="json"),
                                    "environment_type": f"{type(self).__module__}.{type(self).__name__}"}}}


async def sandbox_uname(sandbox: Sandbox) -> dict[str, str]:
    """platform.uname()'s fields as the sandbox reports them (empty where it cannot)."""
    res = await sandbox.exec("uname -s; uname -n; uname -r; uname -v; uname -m", timeout=60, lost="rerun")
    values = res.stdout.splitlines() if res.ok else []
    keys = ("system", "node", "release", "version", "machine")
    return {k: (values[i] if i < len(values) else "") for i, k in enumerate(keys)}


def host_agent(config: dict[str, Any], base_config: str, api_key: str | None, sandbox: Sandbox,
               loop: asyncio.AbstractEventLoop, **env_kwargs: Any) -> tuple[DefaultAgent, SandboxEnvironment]:
    """(mini's agent, our environment) for the generated config over the base config file.

    The agent saves no trajectory while it runs (mini would re-encode the whole history
    after every step: quadratic in the turns); the caller saves it once, at the end
    (`agent.save(path)`), however the run ends.
    """
    try:
        base = copy.deepcopy(_base_config(base_config))
    except (OSError, ValueError) as exc:
        raise UserError(f"harness.config.config_file: {exc}") from None
    config = native_config(base, config)  # mini's base config file, the generated config over it
    key = api_key or "unused"

    class Model(LitellmModel):  # the key goes with each call, never into the saved config
        def query(self, messages, **kwargs):
            return super().query(messages, api_key=key, **kwargs)

    model_cfg = {k: v for k, v in config.get("model", {}).items() if k != "model_class"}
    env_cfg = {k: v for k, v in config.get("environment", {}).items() if k != "environment_class"}
    env = SandboxEnvironment(sandbox, loop, **env_kwargs, **env_cfg)
    agent_cfg = {**config.get("agent", {}), "output_path": None}
    return get_agent(Model(**model_cfg), env, agent_cfg, default_type="default"), env



def _base_config(spec: str) -> dict[str, Any]:
    """mini's config file (as mini finds it: a path, or a built-in name), parsed once per
    process and file version (pure-Python YAML: ~50 ms a time); the step server parses the
    default one before it forks (`warm_up`)."""
    path = get_config_path(spec).resolve()
    return _parsed(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _parsed(path: str, _mtime_ns: int) -> dict[str, Any]:
    return get_config_from_spec(Path(path))


def warm_up() -> list[str]:
    """Import here what a first model call imports (litellm loads ~100 modules of itself and
    its HTTP stack lazily, ~0.6 CPU-s and ~15 MB that every forked harness step would pay
    again); returns their names. They are found by one call with litellm's `mock_response`
    (no network) in a throwaway child process, since that call starts a logging thread,
    which this process must not have when it forks."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one mock call, then the names of what it imported
        code = 1
        try:
            os.close(read)
            quiet = os.open(os.devnull, os.O_WRONLY)  # litellm prints its failures
            os.dup2(quiet, 1)
            os.dup2(quiet, 2)
            before = set(sys.modules)
            model = LitellmModel(model_name="openai/warm-up", cost_tracking="ignore_errors",
                                 model_kwargs={"api_base": "http://127.0.0.1:9/v1", "mock_response": "hello"})
            with contextlib.suppress(Exception):  # mini rejects the reply: it calls no tool
                model.query([{"role": "user", "content": "hello"}], api_key="unused")
            with contextlib.suppress(Exception):  # and the HTTP stack: a port that refuses
                litellm.completion(model="openai/warm-up", messages=[{"role": "user", "content": "hello"}],
                                   api_base=f"http://127.0.0.1:{_refusing_port()}/v1", api_key="unused",
                                   num_retries=0, max_retries=0, timeout=5)
            os.write(write, "\n".join(sorted(set(sys.modules) - before)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with contextlib.suppress(OSError, ValueError):
        _base_config(BASE_CONFIG)
    with os.fdopen(read) as fh:
        names = fh.read().split()
    os.waitpid(pid, 0)
    for name in names:
        with contextlib.suppress(Exception):  # a module that only imports in its parent's context
            importlib.import_module(name)
    return names


def _refusing_port() -> int:
    """A local TCP port nobody listens on (bound, then closed)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
