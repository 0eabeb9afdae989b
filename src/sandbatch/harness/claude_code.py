"""`claude-code`: Claude Code (npm `@anthropic-ai/claude-code`) run headlessly with
`claude -p --output-format stream-json --verbose`.

Claude Code speaks Anthropic's Messages API: ANTHROPIC_BASE_URL points it at the rollout's
proxy, which serves /v1/messages over the run's OpenAI-compatible upstream (proxy/messages.py);
every model it would pick (main, small/fast, subagents) is the run's model. Its key is the
proxy's per-rollout key. Telemetry, error reports, auto-updates and other non-essential
traffic are off; the web tools are disallowed and `git` commands that read history the
base commit lacks are denied (settings passed with --settings). Permissions are skipped
for the headless run (--dangerously-skip-permissions; IS_SANDBOX=1 lets it run so as root,
as it refuses otherwise). HOME and CLAUDE_CONFIG_DIR are under the sandbox's scratch space,
so its settings, sessions and user memory never enter the repository.
The prompt goes in on stdin.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from ..rollout import responses
from ..core.errors import UserError
from ..sandbox import Sandbox
from ._npm import NpmHarness, NpmInstall
from ._process import json_events, run_command, str_env
from .base import Conversion, Options, Outcome, RunContext, keep_unknown, model_endpoint, native_config

# Anti-cheat default: no web, and no reading the fix from history the base commit lacks
# (deny rules hold even with permissions skipped).
DEFAULT_DENY = ["WebFetch", "WebSearch"] + [f"Bash({cmd}:*)" for cmd in (
    "git log", "git show", "git reflog", "git whatchanged", "git rev-list", "git cat-file", "git fetch",
    "git pull", "git clone")]

# what Claude Code does besides calling its model, all off
QUIET_ENV = {
    "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1", "DISABLE_COST_WARNINGS": "1", "DISABLE_PROMPT_CACHING": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1", "IS_SANDBOX": "1",
}


class ClaudeCodeOptions(Options):
    install: NpmInstall = Field(default_factory=lambda: NpmInstall(package="@anthropic-ai/claude-code"),
                                description=("How Claude Code gets into the sandbox (upload's source: the claude "
                                             "binary, or an npm prefix holding bin/claude)."))
    max_turns: int | None = Field(None, description="--max-turns (null: Claude Code's own limit).")
    max_output_tokens: int = Field(32000, description="CLAUDE_CODE_MAX_OUTPUT_TOKENS.")
    deny: Any = Field(default_factory=lambda: list(DEFAULT_DENY), description="permissions.deny rules.")
    settings: dict[str, Any] = Field(default_factory=dict, description=(
        "Claude Code's own settings, deep-merged over the generated ones (--settings)."))
    env: dict[str, Any] = Field(default_factory=dict, description="Extra environment of the agent.")
    extra_args: list[Any] = Field(default_factory=list, description="More `claude` arguments.")


class ClaudeCodeHarness(NpmHarness):
    name = "claude-code"
    binary = "claude"
    version_env = QUIET_ENV
    default_version = "2.1.332"
    options = ClaudeCodeOptions

    def check_config(self, opts: ClaudeCodeOptions) -> None:
        super().check_config(opts)
        if not isinstance(opts.deny, list):
            raise UserError("harness.config.deny: give a list of Claude Code permission rules, e.g. [WebFetch]")

    def state_env(self, sandbox: Sandbox) -> dict[str, str]:
        env = super().state_env(sandbox)
        return {**env, "CLAUDE_CONFIG_DIR": f"{env['HOME']}/.claude"}

    def settings(self, ctx: RunContext) -> dict[str, Any]:
        generated = {"permissions": {"deny": [str(rule) for rule in ctx.options.deny]},
                     "includeCoAuthoredBy": False, "cleanupPeriodDays": 1}
        return native_config(generated, ctx.options.settings)

    def env(self, sandbox: Sandbox, ctx: RunContext) -> dict[str, str]:
        base = model_endpoint(ctx, self.name).rstrip("/")
        model = ctx.model.name or ""
        return {**self.state_env(sandbox), **QUIET_ENV,
                # Claude Code adds /v1/messages itself
                "ANTHROPIC_BASE_URL": base[:-3] if base.endswith("/v1") else base,
                "ANTHROPIC_API_KEY": ctx.api_key or "unused",
                **dict.fromkeys(("ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL",
                                 "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL",
                                 "CLAUDE_CODE_SUBAGENT_MODEL"), model),
                "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(int(ctx.options.max_output_tokens)),
                **str_env(ctx.options.env)}

    async def run(self, sandbox: Sandbox, ctx: RunContext) -> Outcome:
        opts = ctx.options
        argv = [self._binary(sandbox, opts), "-p", "--output-format", "stream-json", "--verbose",
                "--model", ctx.model.name or "", "--dangerously-skip-permissions",
                "--disallowedTools", "WebFetch,WebSearch", "--settings", json.dumps(self.settings(ctx))]
        argv += ["--max-turns", str(int(opts.max_turns))] if opts.max_turns else []
        argv += [str(a) for a in opts.extra_args]
        run = await run_command(sandbox, argv, timeout=ctx.timeouts.agent, env=self.env(sandbox, ctx),
                                stdin=ctx.prompt.encode("utf-8"))
        events = json_events(run.stdout)
        outcome = self.outcome(run, events)
        result = next((ev for ev in reversed(events) if ev.get("type") == "result"), None)
        if outcome.status == "ok":
            failure = result_failure(result)
            if failure is not None:
                outcome.status, outcome.failure_class = "agent_error", failure
        if result is not None and result.get("subtype") == "error_max_turns":
            outcome.metadata["gave_up"] = True  # stopped at --max-turns without finishing
        return outcome

    def convert(self, events, opts) -> Conversion:
        conv = Conversion(items=[])
        failed = 0
        for ev in events:
            kind = ev.get("type") if isinstance(ev, dict) else None
            message = ev.get("message") if kind in ("assistant", "user") and isinstance(ev.get("message"), dict) else None
            if message is not None and isinstance(message.get("content"), (list, str)):
                content = message["content"]
                blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
                for block in blocks:
                    failed += self._block(conv, kind, block)
            elif kind == "system" and ev.get("subtype") == "init":
                conv.metadata["session_ids"] = [ev.get("session_id")]
                conv.metadata["claude_code"] = {k: ev.get(k) for k in ("model", "claude_code_version",
                                                                       "permissionMode", "tools")}
            elif kind == "system":  # progress notes (thinking_tokens, compact_boundary, ...): counted
                subtypes = conv.metadata.setdefault("system_events", {})
                subtypes[str(ev.get("subtype"))] = subtypes.get(str(ev.get("subtype")), 0) + 1
            elif kind == "result":
                conv.metadata["claude_code_result"] = {k: ev.get(k) for k in (
                    "subtype", "is_error", "num_turns", "duration_ms", "duration_api_ms", "total_cost_usd",
                    "usage", "result")}
            else:
                keep_unknown(conv, ev)
        if failed:
            conv.metadata["failed_tool_results"] = failed
        return conv

    @staticmethod
    def _block(conv: Conversion, role: str, block: Any) -> int:
        """One content block as its item; returns 1 for a failed tool result."""
        kind = block.get("type") if isinstance(block, dict) else None
        if role == "assistant" and kind == "thinking" and str(block.get("thinking") or "").strip():
            conv.items.append(responses.reasoning(block["thinking"]))
        elif role == "assistant" and kind == "text" and str(block.get("text") or "").strip():
            conv.items.append(responses.message(block["text"]))
        elif role == "assistant" and kind == "tool_use":
            conv.items.append(responses.function_call(str(block.get("id", "")), str(block.get("name", "")),
                                                      block.get("input") or {}))
        elif role == "user" and kind == "tool_result":
            conv.items.append(responses.function_call_output(str(block.get("tool_use_id", "")),
                                                             _result_text(block.get("content"))))
            return int(block.get("is_error") is True)
        elif role == "user" and kind == "text":
            conv.add_feedback(str(block.get("text", "")))  # what Claude Code told the model
        elif kind not in ("thinking", "text", "redacted_thinking"):
            keep_unknown(conv, block)
        return 0


def result_failure(result: dict[str, Any] | None) -> str | None:
    """The failure class of a run that exited 0, from its final `result` event (None: ok)."""
    if result is None:
        return "no_result"  # it ended without saying how
    if result.get("subtype") == "error_max_turns":
        return "turn_limit"
    if result.get("is_error") or result.get("subtype") != "success":
        return "agent_error_event"  # e.g. the model API kept failing
    return None


def _result_text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) if isinstance(b, dict) and b.get("type") == "text"
                         else json.dumps(b, ensure_ascii=False) for b in content)
    return "" if content is None else content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
