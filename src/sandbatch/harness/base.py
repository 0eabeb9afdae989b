"""The harness interface: how an agent gets into a sandbox, runs, and is converted.

A harness module declares its options as a pydantic model (`Harness.options`: every key of
`harness.config` with its default and meaning; the run's config holds them resolved, see
`resolve_config`), installs itself, runs with a wall-clock timeout, maps its exit code to a
status, and converts its raw event stream into Responses output items.
"""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

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
    options: Options  # the harness's resolved options, typed (Harness.options_of)
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


class Options(BaseModel):
    """A harness's `harness.config`. A field whose value is a mapping the agent itself reads
    (its native config) is a plain dict: what lies below it is the agent's."""

    model_config = ConfigDict(extra="forbid")

    inline_think: bool = Field(False, description=(
        "Fold each reasoning item into the next message as `<think>...</think>` when the convert "
        "step builds response.json (for consumers that read reasoning inline)."))


class InstallOptions(BaseModel):
    """How a harness's agent gets into the sandbox (`harness.config.install`)."""

    model_config = ConfigDict(extra="forbid")

    method: str = Field(description="How the agent is installed (the harness lists its methods).")
    source: str | None = Field(None, description="upload: the agent's program (file or directory) on this host.")
    path: str | None = Field(None, description="path: the agent's program inside the image.")
    env: dict[str, Any] = Field(default_factory=dict, description="Extra environment of the install command.")


class HoldOptions(Options):
    """The probe harnesses' (none, oracle) options."""

    hold_seconds: float = Field(0, ge=0, description=(
        "Keep the sandbox busy until this many seconds after the agent started, so the agent lasts "
        "a fixed time (benchmarks/utilisation.py measures the orchestration around it)."))


class Harness(abc.ABC):
    name: ClassVar[str]
    needs_model: ClassVar[bool] = True  # False: no proxy is started
    default_version: ClassVar[str | None] = None
    options: ClassVar[type[Options]] = Options

    def resolve_config(self, user: Mapping[str, Any]) -> dict[str, Any]:
        """`harness.config` over the options' defaults, validated: the config the run's settings
        hold and every step reads (called once, where the run's config is loaded; a resolved
        config resolves to itself). UserError (one line naming the key) for a key or value
        the options do not take.

        Deep-merged, not only validated: a free-form block with defaults (pool's agent_config,
        opencode's permission) keeps the default keys the user does not set."""
        if not isinstance(user, Mapping):
            raise UserError(f"harness.config: {user!r} is not a mapping; give the harness's options as key: value")
        merged = deep_merge(self.options().model_dump(mode="json"), user)
        self._check_keys("harness.config", merged, self.options)
        try:
            return self.options.model_validate(merged).model_dump(mode="json")
        except ValidationError as exc:
            raise UserError(_one_line(exc)) from None

    def options_of(self, config: Mapping[str, Any]) -> Options:
        """The typed options of a `harness.config` (a resolved config resolves to itself): what
        every method below, and the run's context, reads as attributes."""
        return self.options.model_validate(self.resolve_config(config))

    def _check_keys(self, where: str, config: Mapping[str, Any], model: type[BaseModel]) -> None:
        """Unknown keys, one line naming the first (the options' nested blocks too)."""
        allowed = set(model.model_fields)
        unknown = sorted(set(config) - allowed)
        if unknown:
            raise UserError(f"{where}: unknown key '{unknown[0]}' for harness {self.name}"
                            f"{did_you_mean(unknown[0], allowed)}; allowed keys: {', '.join(sorted(allowed))}")
        for key, field_info in model.model_fields.items():
            sub = field_info.annotation
            if isinstance(sub, type) and issubclass(sub, BaseModel) and isinstance(config.get(key), Mapping):
                self._check_keys(f"{where}.{key}", config[key], sub)

    def check_config(self, opts: Options) -> None:
        """Raise UserError for options that cannot work (called before any job starts):
        what the options' types cannot say (an install method's own needs, files on this host)."""

    def check_model(self, opts: Options, model: ModelConfig) -> None:
        """Raise UserError when the model endpoint lacks a fact the options leave to it
        (called once, before any job starts; default: nothing to check)."""

    def model_on_host(self, opts: Options) -> bool:
        """True when the agent's model client runs on this host (not in the sandbox)."""
        return False

    def host_modules(self, opts: Options) -> tuple[str, ...]:
        """The heavy modules the harness step imports with these options: the step server
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
    def convert(self, events: list[dict[str, Any]], opts: Options) -> Conversion:
        """Raw events -> Responses output items. Must never raise on unknown records."""


async def hold(sandbox: Sandbox, ctx: RunContext, since: float) -> None:
    """`hold_seconds` of the probe harnesses (none, oracle): keep the sandbox busy until that
    many seconds after `since` (time.monotonic()), with a `sleep` in it, so the agent lasts
    a fixed time; benchmarks/utilisation.py measures the orchestration around it."""
    seconds = ctx.options.hold_seconds if isinstance(ctx.options, HoldOptions) else 0.0
    left = seconds - (time.monotonic() - since)
    if left > 0:
        await sandbox.exec(f"sleep {left:.3f}", timeout=ctx.timeouts.agent)


def native_config(generated: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """An agent's own config file: what the harness generates for the rollout, with the user's
    native block (`opencode_config`, `codex_config`, `settings`, `mini_config`) merged over it,
    mappings key by key. The one deep merge outside config loading: the generated part holds
    what only the rollout knows (the model's URL, the workdir, the prompt)."""
    return deep_merge(generated, overrides)


def _one_line(exc: ValidationError) -> str:
    """A pydantic error as the config's errors read: the key, the value, what it must be."""
    err = exc.errors()[0]
    key = ".".join(["harness.config", *map(str, err["loc"])])
    return f"{key}: {err.get('input')!r} is not allowed; {err['msg'][:1].lower()}{err['msg'][1:]}"


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
