"""`pool`: Poolside's agent CLI, run headlessly with `pool exec -o json`.

pool's `--agent-config-file` replaces its built-in defaults instead of merging with them,
so the generated file carries the whole default (as of pool 1.0.16) with the model
endpoint and compaction thresholds filled in, and `harness.config.agent_config` is
deep-merged over it. Exit 4 means the agent said it could not finish: a normal rollout
that is graded like any other.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import shlex
from collections import deque
from pathlib import Path
from typing import Any

from pydantic import Field

from ..rollout import responses
from ..core.config import ModelConfig
from ..core.errors import InfraError, UserError
from ..core.failures import FailureClass
from ..sandbox import Sandbox
from ..proxy.served import served_context_window
from ._process import install_options, json_events, run_command, sh, str_env, upload_source
from .base import Conversion, Harness, InstallOptions, Options, Outcome, RunContext, keep_unknown, model_endpoint

GAVE_UP_EXIT = 4
INSTALL_METHODS = ("installer", "upload", "path")
# Read when the install settings are resolved, so a shipped profile runs without edits:
EULA_ENV = "SANDBATCH_POOL_ACCEPT_EULA"  # 1/true/yes: you accept Poolside's EULA (the installer runs)
BINARY_ENV = "SANDBATCH_POOL_BINARY"  # a pool binary on this host, uploaded instead of the installer
SEP = "|◊|"

# pool's built-in agent config. None = filled in per run (model endpoint, compaction from
# max_context_window); a value the user sets in agent_config is kept as given.
AGENT_DEFAULT: dict[str, Any] = {
    "max_steps": 0,
    "http_timeout": "5m0s",
    "enabled_tools": ["todo_action", "read", "edit", "write", "get_diagnostics", "question", "shell",
                      "shell_list", "shell_tail", "shell_status", "shell_kill", "shell_send", "shell_wait",
                      "skill", "subagent", "switch_mode", "list_secrets", "exit"],
    "enable_no_tool_call_retry": False,
    "enable_truncation_recovery": True,
    "enable_multi_tool_calls": True,
    "enable_tool_call_loop_detection": True,
    "enable_todo_reminders": True,
    "parallel_tool_calls": {"tools": ["subagent"]},
    "tools": {
        "edit": {"fuzzy_match_threshold": 0.05},
        "read": {"max_lines": 500, "line_num_separator": SEP},
        "write": {"line_num_separator": SEP},
        "shell": {"foreground_timeout": "120s"},
    },
    "model": {
        # streaming off: one answer per call (model.tokens records streamed calls too)
        "provider": {"openai": {"base_url": None, "api_key": None, "model_id": None, "use_streaming": False}},
        "prompt": {"hidden_tool_names": ["exit"]},
        "max_completion_retries": 2,
        "max_completion_retries_transient": 3,
        "exit_tool_on_stop": True,
        "streaming_events_interval": "100ms",
    },
    "memory": {"compact": {"TriggerCompressionTokenCount": None, "MaxSummarizeTokenCount": None,
                           "MinRetainedSteps": 5}},
}


class PoolInstall(InstallOptions):
    method: str = Field("installer", description="installer | upload (from this host) | path (in the image).")
    accept_eula: Any = Field(False, description=(
        f"The installer runs once Poolside's EULA is accepted (true, or ${EULA_ENV}=1)."))
    installer_url: str = Field("https://downloads.poolside.ai/pool/install.sh", description="The installer script.")
    source: str | None = Field(None, description=f"upload: the pool binary on this host (or ${BINARY_ENV}).")
    path: str | None = Field(None, description="path: the pool binary inside the image.")


class PoolOptions(Options):
    install: PoolInstall = Field(default_factory=PoolInstall, description="How pool gets into the sandbox.")
    max_context_window: int | None = Field(None, description=(
        "Tokens; compaction starts at 80 %, summaries up to 70 %. null: the endpoint's /v1/models "
        "max_model_len (vLLM, SGLang), else the run stops before it starts."))
    agent_config: dict[str, Any] = Field(default_factory=lambda: copy.deepcopy(AGENT_DEFAULT), description=(
        "pool's agent config file (it replaces pool's built-in defaults, so the default is pool's "
        "own); keys given here merge over it; null values are filled in per run."))
    env: dict[str, Any] = Field(default_factory=dict, description="Extra environment of the agent.")
    extra_args: list[Any] = Field(default_factory=list, description="Appended to `pool exec`.")


class PoolHarness(Harness):
    name = "pool"
    default_version = "v1.0.16"
    options = PoolOptions

    @staticmethod
    def install_settings(opts: PoolOptions) -> PoolInstall:
        """`install` with the environment applied: $SANDBATCH_POOL_BINARY replaces the installer
        by an upload of that file; $SANDBATCH_POOL_ACCEPT_EULA=1 accepts the EULA."""
        install = opts.install
        binary = os.environ.get(BINARY_ENV, "").strip()
        if install.method == "installer" and binary:
            return install.model_copy(update={"method": "upload", "source": binary})
        if install.method == "installer" and os.environ.get(EULA_ENV, "").strip().lower() in ("1", "true", "yes"):
            return install.model_copy(update={"accept_eula": True})
        return install

    def check_config(self, opts: PoolOptions) -> None:
        super().check_config(opts)
        settings = self.install_settings(opts)
        if settings.source != opts.install.source and not Path(settings.source).expanduser().is_file():
            raise UserError(f"${BINARY_ENV}: {settings.source} is not a file; give the pool binary, or unset it")
        install = install_options(self.name, settings, INSTALL_METHODS)
        if install.method == "installer" and install.accept_eula is not True:
            raise UserError(f"harness.config.install.accept_eula: the pool installer needs Poolside's EULA accepted; "
                            f"export {EULA_ENV}=1 (or set accept_eula: true), or export {BINARY_ENV}=/path/to/pool "
                            f"to upload your own binary")
        if install.method == "upload" and not Path(install.source).expanduser().is_file():
            raise UserError(f"harness.config.install.source: {install.source} is not a file; give the pool binary")

    def check_model(self, opts: PoolOptions, model: ModelConfig) -> None:
        if opts.max_context_window is None:
            window, why = served_context_window(model)
            if window is None:
                raise UserError(f"harness.config.max_context_window: not set, and {why}; set it to the "
                                f"model's context length in tokens")

    def _home(self, sandbox: Sandbox) -> str:
        return f"{sandbox.tmpdir}/pool"

    def _binary(self, sandbox: Sandbox, install: PoolInstall) -> str:
        return install.path if install.method == "path" else f"{self._home(sandbox)}/bin/pool"

    async def install(self, sandbox: Sandbox, ctx: RunContext) -> None:
        self.check_config(ctx.options)
        install = self.install_settings(ctx.options)
        binary = self._binary(sandbox, install)
        timeout = ctx.timeouts.install
        if install.method == "upload":
            await upload_source(sandbox, install.source, binary, timeout)
        elif install.method == "installer":
            bindir = shlex.quote(str(Path(binary).parent))
            await sh(sandbox, (
                f"set -e; mkdir -p {bindir}; curl -fsSL {shlex.quote(install.installer_url)} | "
                f"POOL_INSTALL_ACCEPT_EULA=1 POOL_INSTALL_DIR={bindir} sh -s -- {shlex.quote(self.version(ctx))}; "
                # wherever under the install dir the installer put it, bin/pool is the binary
                f"[ -x {bindir}/pool ] || ln -sf \"$(find {bindir} -type f -name pool | head -n1)\" {bindir}/pool; "
                f"{bindir}/pool --version"),
                timeout=timeout, what="the pool installer", env=str_env(install.env))
        await sh(sandbox, f"test -x {shlex.quote(binary)} || command -v {shlex.quote(binary)}",
                 timeout=60, what=f"finding the pool binary {binary}")

    def agent_config(self, ctx: RunContext, window: int | None = None) -> dict[str, Any]:
        """The whole agent config file: defaults, then per-run values where the user set none.

        `window` is the model's context length when the config leaves it to the endpoint."""
        opts = ctx.options
        cfg = copy.deepcopy(opts.agent_config)
        endpoint = model_endpoint(ctx, self.name)
        window = int(opts.max_context_window or window or 0)
        if window <= 0:
            raise UserError("harness.config.max_context_window: not set; set it to the model's context "
                            "length in tokens")
        fill = {("model", "provider", "openai", "base_url"): endpoint,
                ("model", "provider", "openai", "api_key"): ctx.api_key or "unused",
                ("model", "provider", "openai", "model_id"): ctx.model.name,
                ("memory", "compact", "TriggerCompressionTokenCount"): int(0.8 * window),
                ("memory", "compact", "MaxSummarizeTokenCount"): int(0.7 * window)}
        for path, value in fill.items():
            node = cfg
            for key in path[:-1]:
                node = node.setdefault(key, {})
            if node.get(path[-1]) is None:
                node[path[-1]] = value
        return cfg

    async def run(self, sandbox: Sandbox, ctx: RunContext) -> Outcome:
        home = self._home(sandbox)
        cfg_path, prompt_path = f"{home}/agent-config.json", f"{home}/prompt.txt"
        opts, window = ctx.options, None
        if opts.max_context_window is None:  # checked before the run; the endpoint may be down now
            window, why = await asyncio.to_thread(served_context_window, ctx.model)
            if window is None:
                raise InfraError(f"the model's context window: {why}", FailureClass.MODEL_CONTEXT_WINDOW)
        await sandbox.upload_files({cfg_path: (json.dumps(self.agent_config(ctx, window), indent=2).encode(), 0o600),
                                    prompt_path: (ctx.prompt.encode("utf-8"), 0o644)})
        argv = [self._binary(sandbox, self.install_settings(opts)), "exec", "-o", "json", "--sandbox", "disabled",
                "--unsafe-auto-allow", "--agent-config-file", cfg_path, "-f", prompt_path,
                *map(str, opts.extra_args)]
        # any POOLSIDE_API_KEY skips pool's login; the model key lives in the agent config
        env = {**self.state_env(sandbox), "POOLSIDE_API_KEY": "unused",
               **str_env(opts.env)}
        run = await run_command(sandbox, argv, timeout=ctx.timeouts.agent, env=env)
        return self.outcome(run, json_events(run.stdout),
                            **({"gave_up": True} if run.exit_code == GAVE_UP_EXIT else {}))

    def status_for_exit(self, exit_code, timed_out):
        if exit_code == GAVE_UP_EXIT and not timed_out:
            return "ok", None
        return super().status_for_exit(exit_code, timed_out)

    def convert(self, events, opts) -> Conversion:
        """Every event survives: as an item, in metadata (errors, unknown), or counted (skipped).

        len(events) == len(items) - unanswered_calls + sum(skipped) + len(errors) + unknown.
        """
        conv = Conversion(items=[])
        errors: list[Any] = []
        skipped: dict[str, int] = {}
        waiting: deque[str] = deque()  # call ids without a result, oldest first
        where: dict[str, int] = {}  # call id -> index of its function_call item
        orphans = failed = 0

        def skip(kind: str) -> None:
            skipped[kind] = skipped.get(kind, 0) + 1

        for ev in events:
            if not isinstance(ev, dict):
                keep_unknown(conv, ev)
                continue
            kind = ev.get("type")
            if (kind is None and "error" in ev) or kind == "error":
                errors.append(ev)
            elif kind == "reasoning":
                if ev.get("reasoning"):
                    conv.items.append(responses.reasoning(_text(ev["reasoning"])))
                else:
                    skip("empty_reasoning")
            elif kind in ("thought", "oauth_url"):
                skip(kind)  # thought repeats the reasoning before it; oauth_url is a login prompt
            elif kind == "assistantMessage":
                text = ev.get("message")
                if isinstance(text, str) and text.strip():
                    conv.items.append(responses.message(text))
                else:
                    skip("blank_message")
            elif kind == "toolCall":
                call_id = f"call_{len(where)}"  # results carry no id: pool's calls get generated ones
                where[call_id] = len(conv.items)
                waiting.append(call_id)
                name = ev.get("name")
                conv.items.append(responses.function_call(call_id, str(name) if name else "tool",
                                                          _arguments(ev.get("args"))))
            elif kind == "toolCallResult":
                if waiting:
                    call_id = waiting.popleft()
                else:  # no call open: kept as an output of its own, never dropped
                    call_id, orphans = f"orphan_{orphans}", orphans + 1
                if "err" in ev:
                    failed += 1
                conv.items.append(responses.function_call_output(call_id, _result_text(ev)))
            else:  # unknown types
                keep_unknown(conv, ev)
        # a call never answered (typically the final `exit`) gets an empty output right after it
        for call_id in sorted(waiting, key=where.get, reverse=True):
            conv.items.insert(where[call_id] + 1, responses.function_call_output(call_id, ""))
        for key, value in (("errors", errors), ("unanswered_calls", len(waiting)), ("orphan_results", orphans),
                           ("failed_tool_results", failed), ("skipped", skipped)):
            if value:
                conv.metadata[key] = value
        return conv


ERROR_MARK = "[error]"  # how a failed tool result is marked in its output (as the reference does)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _arguments(args: Any) -> str:
    """A call's arguments as a JSON string: objects encoded, JSON text kept, other text quoted."""
    if args is None:
        return "{}"
    if isinstance(args, str):
        try:
            json.loads(args)
            return args
        except ValueError:
            return json.dumps(args, ensure_ascii=False)
    return json.dumps(args, ensure_ascii=False)


def _result_text(ev: dict[str, Any]) -> str:
    """A result's output: `[error] <err>` first when it failed, then its result or entries."""
    parts = []
    if "err" in ev:
        parts.append(f"{ERROR_MARK} {_text(ev['err'])}")
    if "result" in ev:
        parts.append(_text(ev["result"]))
    entries = ev.get("entries")
    if isinstance(entries, list):
        parts.append("\n".join(entries) if all(isinstance(e, str) for e in entries) else _text(entries))
    return "\n".join(parts)
