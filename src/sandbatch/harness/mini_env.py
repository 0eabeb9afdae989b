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
step server imports this module once per run (`MiniSweAgentHarness.host_modules`) and
forks every harness step from it. That is safe: importing them starts no thread and opens
no connection (tests/test_harness_mini_swe_agent.py forks after the import and calls the
model from many children at once).
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

from pydantic import BaseModel

# read when they are imported: no cost map fetched from the internet, no banner
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")

from minisweagent.agents import get_agent  # noqa: E402
from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.config import get_config_from_spec  # noqa: E402
from minisweagent.exceptions import Submitted  # noqa: E402
from minisweagent.models.litellm_model import LitellmModel  # noqa: E402

from ..errors import UserError  # noqa: E402
from ..sandbox import Sandbox  # noqa: E402
from ..util import deep_merge  # noqa: E402

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
    res = await sandbox.exec("uname -s; uname -n; uname -r; uname -v; uname -m", timeout=60)
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
        base = get_config_from_spec(base_config)
    except (OSError, ValueError) as exc:
        raise UserError(f"harness.config.config_file: {exc}") from None
    config = deep_merge(base, config)
    key = api_key or "unused"

    class Model(LitellmModel):  # the key goes with each call, never into the saved config
        def query(self, messages, **kwargs):
            return super().query(messages, api_key=key, **kwargs)

    model_cfg = {k: v for k, v in config.get("model", {}).items() if k != "model_class"}
    env_cfg = {k: v for k, v in config.get("environment", {}).items() if k != "environment_class"}
    env = SandboxEnvironment(sandbox, loop, **env_kwargs, **env_cfg)
    agent_cfg = {**config.get("agent", {}), "output_path": None}
    return get_agent(Model(**model_cfg), env, agent_cfg, default_type="default"), env

