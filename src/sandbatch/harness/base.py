"""The harness interface: how an agent gets into a sandbox, runs, and is converted.

A harness module declares its full default config (the user's `harness.config` is
deep-merged over it), installs itself, runs with a wall-clock timeout, maps its exit code
to a status, and converts its raw event stream into Responses output items.
"""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..core.config import ModelConfig, Timeouts
from ..core.errors import UserError
from ..core.failures import FailureClass
from ..contracts.records import Status
from ..sandbox import Sandbox
from ..tasks import Task
from ..core.util import deep_merge, did_you_mean


@dataclass
class RunContext:
    task: Task
    prompt: str
    config: dict[str, Any]  # the merged harness config
    version: str | None
    model: ModelConfig
    model_url: str | None  # OpenAI-compatible base URL the agent uses (the proxy's, or direct)
    api_key: str | None  # what the agent sends; the proxy holds the real upstream key
    timeouts: Timeouts
    rollout_dir: Path


@dataclass
class Outcome:
    """What a harness run produced; the step turns it into harness.json + events.jsonl."""

    events: list[dict[str, Any]]
    exit_code: int | None
    status: Status
    failure_class: FailureClass | None = None
    timed_out: bool = False
    stderr_tail: str = ""
    install_s: float = 0.0
    agent_s: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Conversion:
    items: list[dict[str, Any]]
    unknown: int = 0  # records the converter did not recognise (kept in metadata)
    metadata: dict[str, Any] = field(default_factory=dict)
    # what the harness said to the model, where its events record it: the system prompt,
    # the first turn's input (the task prompt as the agent's template rendered it; None: the
    # convert step records the prompt it handed the harness), and its later messages to the
    # model (format errors, limits): {"after": id of the output item it follows or None, "text"}
    instructions: str | None = None
    input: list[dict[str, Any]] | None = None
    feedback: list[dict[str, Any]] = field(default_factory=list)

    def add_feedback(self, text: str) -> None:
        """A harness message to the model, after the items converted so far."""
        self.feedback.append({"after": self.items[-1]["id"] if self.items else None, "text": text})


class Harness(abc.ABC):
    name: ClassVar[str]
    needs_model: ClassVar[bool] = True  # False: no proxy is started
    default_version: ClassVar[str | None] = None
    default_config: ClassVar[dict[str, Any]] = {}

    def merge_config(self, user: dict[str, Any]) -> dict[str, Any]:
        return deep_merge(self.default_config, user)

    def check_config(self, config: dict[str, Any]) -> None:
        """Raise UserError for a merged config that cannot work (called before any job starts).

        Keys are those of default_config (plus `inline_think`, which the convert step reads),
        also inside `install`; what is below them (an agent's own config) is the agent's.
        """
        for where, have, allowed in (("harness.config", config, {*self.default_config, "inline_think"}),
                                     ("harness.config.install", config.get("install"),
                                      set(self.default_config.get("install") or ()))):
            unknown = sorted(set(have or ()) - allowed) if isinstance(have, dict) and allowed else []
            if unknown:
                raise UserError(f"{where}: unknown key '{unknown[0]}' for harness {self.name}"
                                f"{did_you_mean(unknown[0], allowed)}; "
                                f"allowed keys: {', '.join(sorted(allowed))}")

    def check_model(self, config: dict[str, Any], model: ModelConfig) -> None:
        """Raise UserError when the model endpoint lacks a fact the merged config leaves to it
        (called once, before any job starts; default: nothing to check)."""

    def model_on_host(self, config: dict[str, Any]) -> bool:
        """True when the agent's model client runs on this host (not in the sandbox)."""
        return False

    def host_modules(self, config: dict[str, Any]) -> tuple[str, ...]:
        """The heavy modules the harness step imports for this merged config: the step server
        imports them once for all rollouts ("module", or "module:function" to call the
        function once after the import, e.g. a warm-up); each must leave the server safe to
        fork (no thread, no connection)."""
        return ()

    def version(self, ctx: RunContext) -> str | None:
        return ctx.version or self.default_version

    def state_env(self, sandbox: Sandbox) -> dict[str, str]:
        """HOME and XDG dirs under the sandbox's tmpdir: nothing lands in the diffed repo."""
        home = f"{sandbox.tmpdir}/home"
        return {"HOME": home, "XDG_CONFIG_HOME": f"{home}/.config", "XDG_STATE_HOME": f"{home}/.local/state",
                "XDG_DATA_HOME": f"{home}/.local/share", "XDG_CACHE_HOME": f"{home}/.cache"}

    async def install(self, sandbox: Sandbox, ctx: RunContext) -> None:
        """Put the harness into the sandbox (default: nothing to install)."""

    @abc.abstractmethod
    async def run(self, sandbox: Sandbox, ctx: RunContext) -> Outcome:
        """Run the agent headlessly in sandbox.workdir within ctx.timeouts.agent."""

    def status_for_exit(self, exit_code: int | None, timed_out: bool) -> tuple[Status, FailureClass | None]:
        if timed_out:
            return "timeout", FailureClass.AGENT_TIMEOUT
        if exit_code == 0:
            return "ok", None
        return "agent_error", FailureClass.AGENT_EXIT

    def outcome(self, run, events: list[dict[str, Any]], **metadata: Any) -> Outcome:
        """The Outcome of an agent run (a _process.AgentRun), status from `status_for_exit`."""
        status, failure = self.status_for_exit(run.exit_code, run.timed_out)
        return Outcome(events=events, exit_code=run.exit_code, status=status, failure_class=failure,
                       timed_out=run.timed_out, stderr_tail=tail(run.stderr), agent_s=run.duration_s,
                       metadata=metadata)

    @abc.abstractmethod
    def convert(self, events: list[dict[str, Any]], config: dict[str, Any]) -> Conversion:
        """Raw events -> Responses output items. Must never raise on unknown records."""


async def hold(sandbox: Sandbox, ctx: RunContext, since: float) -> None:
    """`hold_seconds` of the probe harnesses (none, oracle): keep the sandbox busy until that
    many seconds after `since` (time.monotonic()), with a `sleep` in it, so the agent lasts
    a fixed time; benchmarks/utilisation.py measures the orchestration around it."""
    left = float(ctx.config.get("hold_seconds") or 0) - (time.monotonic() - since)
    if left > 0:
        await sandbox.exec(f"sleep {left:.3f}", timeout=ctx.timeouts.agent)


def tail(text: str, n: int = 2000) -> str:
    return text[-n:]


def model_endpoint(ctx: RunContext, harness: str) -> str:
    """The model URL the agent talks to; a harness that needs a model cannot run without one."""
    if not ctx.model_url:
        raise UserError(f"model.base_url: not set; harness {harness} needs an OpenAI-compatible model "
                        f"endpoint (a URL ending in /v1)")
    return ctx.model_url


KEPT_UNKNOWN = 50  # unknown records kept verbatim in the response metadata (all are counted)


def keep_unknown(conv: Conversion, event: Any) -> None:
    """A record the converter does not know: counted, and kept for the report, never fatal."""
    conv.unknown += 1
    kinds = conv.metadata.setdefault("unknown_types", {})
    kind = str(event.get("type", event.get("role"))) if isinstance(event, dict) else type(event).__name__
    kinds[kind] = kinds.get(kind, 0) + 1
    kept = conv.metadata.setdefault("unknown_records", [])
    if len(kept) < KEPT_UNKNOWN:
        kept.append(event)
