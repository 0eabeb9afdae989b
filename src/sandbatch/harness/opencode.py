"""`opencode`: OpenCode (npm `opencode-ai`) run headlessly with `opencode run --format json`.

The whole configuration travels in OPENCODE_CONFIG_CONTENT: one custom provider
(`@ai-sdk/openai-compatible`) at the run's model URL, nothing else enabled, no updates,
no sharing, the repository's own opencode.json ignored, and a permission map whose
default denies the ways to read the fix from elsewhere (other refs' history, the web).
The prompt goes in on stdin (an argument with spaces would be quoted literally).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from pydantic import Field

from ..rollout import responses
from ..core.failures import FailureClass
from ..sandbox import Sandbox
from ._npm import NpmHarness, NpmInstall
from ._process import json_events, run_command, str_env
from .base import Conversion, Options, Outcome, RunContext, keep_unknown, model_endpoint, native_config
KEY_ENV = "SANDBATCH_MODEL_API_KEY"  # the config names it ({env:...}), so the key is in no file

# Anti-cheat default: the solution must not come from history the task's base commit does
# not contain (other refs, fetched commits) or from the web. Last matching rule wins.
DEFAULT_PERMISSION: dict[str, Any] = {
    "*": "allow",
    "webfetch": "deny",
    "websearch": "deny",
    "codesearch": "deny",
    "bash": {"*": "allow",
             **dict.fromkeys(["git log*", "git show*", "git reflog*", "git whatchanged*", "git rev-list*",
                              "git cat-file*", "git fetch*", "git pull*", "git clone*"], "deny")},
}


class OpenCodeOptions(Options):
    install: NpmInstall = Field(default_factory=lambda: NpmInstall(package="opencode-ai"), description=(
        "How OpenCode gets into the sandbox (upload's source: the opencode binary, or an npm prefix "
        "holding bin/opencode)."))
    provider_id: str = Field("sandbatch", description="Name of the model provider in the generated config.")
    context_window: int = Field(131072, description="The model's context limit OpenCode is told.")
    max_output_tokens: int = Field(32768, description="The model's output limit OpenCode is told.")
    permission: dict[str, Any] = Field(default_factory=lambda: copy.deepcopy(DEFAULT_PERMISSION), description=(
        "OpenCode's permission map (the last matching rule wins); keys given here merge over the default's."))
    opencode_config: dict[str, Any] = Field(default_factory=dict, description=(
        "OpenCode's own config, deep-merged over the generated one."))
    agent: str | None = Field(None, description="--agent (null: OpenCode's default agent).")
    thinking: bool = Field(True, description="--thinking: reasoning parts appear in the event stream.")
    pure: bool = Field(True, description="--pure: no external plugins (and no plugin install at start).")
    env: dict[str, Any] = Field(default_factory=dict, description="Extra environment of the agent.")
    extra_args: list[Any] = Field(default_factory=list, description="More `opencode run` arguments.")


class OpenCodeHarness(NpmHarness):
    name = "opencode"
    binary = "opencode"
    default_version = "1.18.33"
    options = OpenCodeOptions

    def opencode_config(self, ctx: RunContext) -> dict[str, Any]:
        opts, pid, model = ctx.options, ctx.options.provider_id, ctx.model.name
        generated = {
            "$schema": "https://opencode.ai/config.json",
            "model": f"{pid}/{model}",
            "small_model": f"{pid}/{model}",
            "enabled_providers": [pid],
            "autoupdate": False,
            "share": "disabled",
            "provider": {pid: {
                "npm": "@ai-sdk/openai-compatible",
                "name": pid,
                "options": {"baseURL": model_endpoint(ctx, self.name), "apiKey": f"{{env:{KEY_ENV}}}"},
                "models": {model: {"name": model, "limit": {"context": int(opts.context_window),
                                                            "output": int(opts.max_output_tokens)}}},
            }},
            "permission": opts.permission,
        }
        return native_config(generated, opts.opencode_config)

    async def run(self, sandbox: Sandbox, ctx: RunContext) -> Outcome:
        opts = ctx.options
        argv = [self._binary(sandbox, opts), "run", "--format", "json", "--auto"]
        argv += ["--thinking"] if opts.thinking else []
        argv += ["--pure"] if opts.pure else []
        argv += ["--agent", str(opts.agent)] if opts.agent else []
        argv += [str(a) for a in opts.extra_args]
        env = {**self.state_env(sandbox),
               "OPENCODE_CONFIG_CONTENT": json.dumps(self.opencode_config(ctx)),
               "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
               "OPENCODE_DISABLE_PROJECT_CONFIG": "1", KEY_ENV: ctx.api_key or "unused", **str_env(opts.env)}
        run = await run_command(sandbox, argv, timeout=ctx.timeouts.agent, env=env, stdin=ctx.prompt.encode("utf-8"))
        events = json_events(run.stdout)
        outcome = self.outcome(run, events)
        if outcome.status == "ok" and any(ev.get("type") == "error" for ev in events):
            outcome.status, outcome.failure_class = "agent_error", FailureClass.AGENT_ERROR_EVENT
        return outcome

    def convert(self, events, opts) -> Conversion:
        conv = Conversion(items=[])
        errors: list[Any] = []
        usage = dict.fromkeys(("input", "output", "reasoning", "cache_read", "cache_write"), 0)
        cost, steps, sessions = 0.0, 0, []
        step: list[tuple[float, list[dict[str, Any]]]] = []  # this step's items by start time
        calls: dict[str, dict[str, Any]] = {}  # callID -> its output item (a later state replaces it)

        def flush() -> None:
            for _, items in sorted(step, key=lambda entry: entry[0]):
                conv.items.extend(items)
            step.clear()

        def add(started: Any, *items: dict[str, Any]) -> None:
            last = step[-1][0] if step else 0.0
            step.append((started if isinstance(started, (int, float)) else last, list(items)))

        for ev in events:
            if not isinstance(ev, dict):
                keep_unknown(conv, ev)
                continue
            kind, part = ev.get("type"), ev.get("part") if isinstance(ev.get("part"), dict) else {}
            if ev.get("sessionID") and ev["sessionID"] not in sessions:
                sessions.append(ev["sessionID"])
            if kind == "text" and part.get("synthetic") is True:
                # OpenCode's own message to the model (after a compaction: "Continue if you have
                # next steps..."), shown in the stream as a text part: not the model's
                flush()
                if isinstance(part.get("text"), str) and part["text"].strip():
                    conv.add_feedback(part["text"])
            elif kind in ("reasoning", "text"):
                text = part.get("text")
                if isinstance(text, str) and text.strip():
                    item = responses.reasoning(text) if kind == "reasoning" else responses.message(text)
                    add((part.get("time") or {}).get("start"), item)
            elif kind == "tool_use" and part.get("callID"):
                state = part.get("state") if isinstance(part.get("state"), dict) else {}
                output = state.get("output") if state.get("status") == "completed" else state.get("error")
                call_id = str(part["callID"])
                if call_id in calls:  # the same call again, in a later state
                    calls[call_id]["output"] = _text(output)
                    continue
                calls[call_id] = responses.function_call_output(call_id, _text(output))
                add((state.get("time") or {}).get("start"),
                    responses.function_call(call_id, str(part.get("tool", "")), state.get("input") or {}),
                    calls[call_id])
            elif kind == "step_start":
                flush()
            elif kind == "step_finish":
                flush()
                steps += 1
                tokens = part.get("tokens") if isinstance(part.get("tokens"), dict) else {}
                cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
                for key, value in (("input", tokens.get("input")), ("output", tokens.get("output")),
                                   ("reasoning", tokens.get("reasoning")), ("cache_read", cache.get("read")),
                                   ("cache_write", cache.get("write"))):
                    usage[key] += value if isinstance(value, int) else 0
                cost += part["cost"] if isinstance(part.get("cost"), (int, float)) else 0.0
            elif kind == "error":
                errors.append(ev.get("error", ev))
            else:
                keep_unknown(conv, ev)
        flush()
        conv.metadata["opencode_usage"] = {**usage, "cost": cost, "steps": steps}
        if sessions:
            conv.metadata["session_ids"] = sessions
        if errors:
            conv.metadata["errors"] = errors
        return conv


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
