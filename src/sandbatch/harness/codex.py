"""`codex`: OpenAI's Codex CLI (npm `@openai/codex`) run headlessly with `codex exec --json`.

CODEX_HOME is a directory under the sandbox's scratch space holding the generated
config.toml: one custom model provider at the run's model URL (its key read from an
environment variable, so it is in no file), approvals never and Codex's own sandbox off
(the sandbox we run it in is the boundary; Codex's bubblewrap sandbox needs namespaces a
container seldom grants), web search, update checks and analytics off, and an exec-policy
rules file that forbids the commands that read the fix from elsewhere (other refs' history).

The prompt goes in on stdin. The events come from two places: the `--json` stream on stdout
(turns, usage, errors, and its own summary of the items), and the session file Codex writes
under CODEX_HOME/sessions, whose `response_item` records are the model's outputs as the
Responses API returned them (call ids, tool names and arguments exactly as generated): the
converter builds the items from those, so their token ids join by call id, and falls back
to the stream's items when the session file is missing.
"""

from __future__ import annotations

import json
import platform
import shlex
from pathlib import Path
from typing import Any

import tomli_w
from pydantic import Field

from ..core.errors import UserError
from ..rollout import responses
from ..core.failures import FailureClass
from ..sandbox import Sandbox
from ._process import check_runs, install_options, json_events, npm_install, run_command, str_env, upload_source
from ._npm import NpmInstall
from .base import Conversion, Harness, Options, Outcome, RunContext, keep_unknown, model_endpoint, native_config

INSTALL_METHODS = ("npm", "upload", "path")
WIRE_APIS = ("responses", "chat")
KEY_ENV = "SANDBATCH_MODEL_API_KEY"  # config.toml names it (env_key), so the key is in no file
SESSION_FILES = "sessions"  # under CODEX_HOME: rollout-*.jsonl, one per thread

# Anti-cheat default: the solution must not come from history the task's base commit does
# not contain (other refs, fetched commits). Codex's exec policy refuses these commands
# whatever the approval mode (a `forbidden` rule is never asked about).
FORBIDDEN_COMMANDS: list[list[str]] = [["git", sub] for sub in (
    "log", "show", "reflog", "whatchanged", "rev-list", "cat-file", "fetch", "pull", "clone")]

# the exec stream's records the converter reads, and those it knows and leaves
_STREAM_ITEMS = ("item.completed",)
_STREAM_KNOWN = ("thread.started", "turn.started", "item.started", "item.updated")
# the session file's records that are not response items: known, not converted
_SESSION_KNOWN = ("session_meta", "event_msg", "turn_context", "world_state", "token_usage_record")


class CodexOptions(Options):
    install: NpmInstall = Field(default_factory=lambda: NpmInstall(package="@openai/codex"), description=(
        "How Codex gets into the sandbox (upload's source: the codex binary, npm's `codex` launcher, "
        "or an npm prefix holding it)."))
    provider_id: str = Field("sandbatch", description="Name of the model provider in the generated config.toml.")
    wire_api: Any = Field("responses", description=(
        "responses | chat (recent Codex releases, the pinned one among them, refuse chat)."))
    context_window: int = Field(131072, description="model_context_window: Codex compacts near it.")
    reasoning_effort: str | None = Field(None, description="model_reasoning_effort (null: Codex's default).")
    agents_md: bool = Field(True, description=(
        "Read the repository's AGENTS.md, as Codex does for a user (false: ignored)."))
    forbidden_commands: Any = Field(default_factory=lambda: [list(c) for c in FORBIDDEN_COMMANDS], description=(
        "Command prefixes (each a list of words) Codex's exec policy refuses; [] for none."))
    codex_config: dict[str, Any] = Field(default_factory=dict, description=(
        "Codex's own config, deep-merged over the generated config.toml."))
    env: dict[str, Any] = Field(default_factory=dict, description="Extra environment of the agent.")
    extra_args: list[Any] = Field(default_factory=list, description="More `codex exec` arguments.")


class CodexHarness(Harness):
    name = "codex"
    default_version = "0.171.0"
    options = CodexOptions

    def check_config(self, opts: CodexOptions) -> None:
        super().check_config(opts)
        install = install_options(self.name, opts.install, INSTALL_METHODS)
        if install.method == "upload":
            native_binary(install.source)
        if opts.wire_api not in WIRE_APIS:
            raise UserError(f"harness.config.wire_api: {opts.wire_api!r} is not a wire API of Codex; "
                            f"choose one of: {', '.join(WIRE_APIS)}")
        rules = opts.forbidden_commands
        if not isinstance(rules, list) or not all(
                isinstance(r, list) and r and all(isinstance(w, str) and w for w in r) for r in rules):
            raise UserError("harness.config.forbidden_commands: give a list of command prefixes, each a list "
                            "of words, e.g. [[git, log], [git, show]] (or [] for none)")

    def _prefix(self, sandbox: Sandbox) -> str:
        return f"{sandbox.tmpdir}/codex"

    def codex_home(self, sandbox: Sandbox) -> str:
        return f"{sandbox.tmpdir}/codex-home"

    def _binary(self, sandbox: Sandbox, opts: CodexOptions) -> str:
        install = opts.install
        if install.method == "path":
            return install.path
        if install.method == "upload":
            return f"{self._prefix(sandbox)}/codex"
        return f"{self._prefix(sandbox)}/bin/codex"

    def _env(self, sandbox: Sandbox) -> dict[str, str]:
        return {**self.state_env(sandbox), "CODEX_HOME": self.codex_home(sandbox)}

    async def install(self, sandbox: Sandbox, ctx: RunContext) -> None:
        self.check_config(ctx.options)
        install, prefix, binary = ctx.options.install, self._prefix(sandbox), self._binary(sandbox, ctx.options)
        timeout = ctx.timeouts.install
        if install.method == "upload":
            await upload_source(sandbox, str(native_binary(install.source)), binary, timeout)
        elif install.method == "npm":
            await npm_install(sandbox, install, self.version(ctx), prefix, timeout=timeout, env=self.state_env(sandbox))
        await check_runs(sandbox, binary, self._env(sandbox))

    def codex_config(self, ctx: RunContext) -> dict[str, Any]:
        """The whole config.toml (as a mapping): Codex reads no other config."""
        opts, pid = ctx.options, ctx.options.provider_id
        generated: dict[str, Any] = {
            "model": ctx.model.name,
            "model_provider": pid,
            "model_context_window": int(opts.context_window),
            # never ask (no one answers) and no sandbox of Codex's own: ours is the boundary
            "approval_policy": "never",
            "sandbox_mode": "danger-full-access",
            "web_search": "disabled",
            "check_for_update_on_startup": False,
            "show_raw_agent_reasoning": True,  # the model's reasoning in the stream, not hidden
            "analytics": {"enabled": False},
            "model_providers": {pid: {"name": pid, "base_url": model_endpoint(ctx, self.name),
                                      "env_key": KEY_ENV, "wire_api": opts.wire_api}},
        }
        if opts.reasoning_effort:
            generated["model_reasoning_effort"] = str(opts.reasoning_effort)
        if not opts.agents_md:
            generated["project_doc_max_bytes"] = 0  # Codex reads no AGENTS.md
        return native_config(generated, opts.codex_config)

    async def run(self, sandbox: Sandbox, ctx: RunContext) -> Outcome:
        opts = ctx.options
        argv = [self._binary(sandbox, opts), "exec", "--json", "--skip-git-repo-check", "--color", "never"]
        argv += [str(a) for a in opts.extra_args]
        argv += ["-"]  # the prompt from stdin
        home = self.codex_home(sandbox)  # written now: the model URL is the proxy's, started after the install
        await sandbox.upload(f"{home}/config.toml", tomli_w.dumps(self.codex_config(ctx)).encode())
        await sandbox.upload(f"{home}/rules/sandbatch.rules", exec_policy(opts.forbidden_commands).encode())
        env = {**self._env(sandbox), KEY_ENV: ctx.api_key or "unused", **str_env(opts.env)}
        run = await run_command(sandbox, argv, timeout=ctx.timeouts.agent, env=env, stdin=ctx.prompt.encode("utf-8"))
        return self.outcome(run, json_events(run.stdout) + await self._session_records(sandbox))

    def outcome(self, run, events: list[dict[str, Any]], **metadata: Any) -> Outcome:
        outcome = super().outcome(run, events, **metadata)
        # a turn that failed (the model unreachable past Codex's retries) may still exit 0
        if outcome.status == "ok" and any(ev.get("type") == "turn.failed" for ev in events):
            outcome.status, outcome.failure_class = "agent_error", FailureClass.AGENT_ERROR_EVENT
        return outcome

    async def _session_records(self, sandbox: Sandbox) -> list[dict[str, Any]]:
        """The records of the session files Codex wrote (in the order they were started)."""
        sessions = shlex.quote(f"{self.codex_home(sandbox)}/{SESSION_FILES}")
        res = await sandbox.exec(f"[ -d {sessions} ] && find {sessions} -name 'rollout-*.jsonl' | sort | "
                                 f"xargs -r cat || true", timeout=120, lost="rerun")
        return [ev for ev in json_events(res.stdout) if ev.get("type") != "sandbatch.text"] if res.ok else []

    def convert(self, events, opts) -> Conversion:
        conv = Conversion(items=[])
        session = [ev for ev in events if isinstance(ev, dict) and ev.get("type") == "response_item"]
        usage = dict.fromkeys(("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens"), 0)
        errors: list[Any] = []
        turns, threads = 0, []
        for ev in events:
            kind = ev.get("type") if isinstance(ev, dict) else None
            if kind == "response_item":
                _response_item(conv, ev.get("payload"))
            elif kind in _STREAM_ITEMS:
                if not session:
                    _stream_item(conv, ev.get("item"))
            elif kind == "turn.completed":
                turns += 1
                got = ev.get("usage") if isinstance(ev.get("usage"), dict) else {}
                for key in usage:
                    usage[key] += got[key] if isinstance(got.get(key), int) else 0
            elif kind in ("turn.failed", "error"):
                errors.append(ev.get("error", ev.get("message", ev)))
            elif kind == "thread.started":
                threads.append(ev.get("thread_id"))
            elif kind == "compacted":
                # Codex replaced its history by a summary here: the next prompt does not extend the last
                conv.metadata.setdefault("codex_compactions", []).append(
                    {"after": conv.items[-1]["id"] if conv.items else None})
            elif kind == "session_meta" and conv.instructions is None:
                # Codex's system prompt: sent as the first developer message, recorded only here
                base = (ev.get("payload") or {}).get("base_instructions")
                conv.instructions = base.get("text") if isinstance(base, dict) else None
            elif kind not in _STREAM_KNOWN and kind not in _SESSION_KNOWN:
                keep_unknown(conv, ev)
        conv.metadata["codex_usage"] = {**usage, "turns": turns}
        conv.metadata["codex_items_from"] = "session" if session else "stream"
        if threads:
            conv.metadata["session_ids"] = threads
        if errors:
            conv.metadata["errors"] = errors
        return conv


def native_binary(source: str) -> Path:
    """The Codex binary to upload for `source`: the binary itself, or the one npm's package
    holds when `source` is its launcher (bin/codex, a Node script) or an npm prefix; only the
    binary (static, musl) is uploaded, so the image needs no Node."""
    path = Path(source).expanduser()
    if path.is_dir():
        path = path / "bin" / "codex"
    path = path.resolve()
    if path.is_file() and not _node_script(path):
        return path
    package = path.parent.parent  # <package>/bin/codex.js
    triple = {"x86_64": "x86_64-unknown-linux-musl", "aarch64": "aarch64-unknown-linux-musl",
              "arm64": "aarch64-unknown-linux-musl"}.get(platform.machine(), "")
    arch = "arm64" if triple.startswith("aarch64") else "x64"
    for vendor in (package / "node_modules" / "@openai" / f"codex-linux-{arch}" / "vendor", package / "vendor"):
        if (vendor / triple / "bin" / "codex").is_file():
            return vendor / triple / "bin" / "codex"
    raise UserError(f"harness.config.install.source: no Codex binary for linux-{arch} at {source}; give the "
                    f"codex binary, or npm's codex launcher or prefix (`npm install -g --prefix DIR @openai/codex`)")


def _node_script(path: Path) -> bool:
    with open(path, "rb") as f:
        return path.suffix == ".js" or b"node" in f.readline(200)


def exec_policy(forbidden: list[list[str]]) -> str:
    """Codex's exec-policy rules file (Starlark) forbidding each command prefix."""
    rules = [f"prefix_rule(pattern={json.dumps(words)}, decision=\"forbidden\", "
             f"justification=\"the fix must come from this checkout, not from other history\")"
             for words in forbidden]
    return "\n".join(rules) + "\n"


def _response_item(conv: Conversion, item: Any) -> None:
    """A Responses item of the session file: the model's outputs and the tools' answers."""
    if not isinstance(item, dict):
        keep_unknown(conv, {"type": "response_item", "payload": item})
        return
    kind = item.get("type")
    if kind == "message":
        text = "\n".join(p.get("text", "") for p in item.get("content") or [] if isinstance(p, dict))
        if item.get("role") == "assistant":
            if text.strip():
                conv.items.append(responses.message(text))
        elif conv.items:  # Codex's later words to the model (a developer or user message)
            conv.add_feedback(text)
        elif item.get("role") in ("developer", "system"):
            conv.instructions = "\n\n".join(filter(None, [conv.instructions, text]))
        else:
            conv.input = (conv.input or []) + [responses.user_message(text)]
    elif kind == "reasoning":
        parts = item.get("content") or item.get("summary") or []
        text = "\n".join(p.get("text", "") for p in parts if isinstance(p, dict))
        if text.strip():
            conv.items.append(responses.reasoning(text))
    elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
        args = item.get("arguments", item.get("input", item.get("action")))
        conv.items.append(responses.function_call(str(item.get("call_id") or item.get("id") or ""),
                                                  str(item.get("name") or kind), args if args is not None else {}))
    elif kind in ("function_call_output", "custom_tool_call_output"):
        conv.items.append(responses.function_call_output(str(item.get("call_id") or ""), _output(item.get("output"))))
    else:
        keep_unknown(conv, {"type": "response_item", "payload": item})


def _stream_item(conv: Conversion, item: Any) -> None:
    """An item of the `--json` stream, when no session file holds the model's own outputs."""
    if not isinstance(item, dict):
        return
    kind, item_id = item.get("type"), str(item.get("id") or f"item_{len(conv.items)}")
    if kind == "agent_message" and str(item.get("text") or "").strip():
        conv.items.append(responses.message(item["text"]))
    elif kind == "reasoning" and str(item.get("text") or "").strip():
        conv.items.append(responses.reasoning(item["text"]))
    elif kind == "command_execution":
        conv.items += [responses.function_call(item_id, "exec_command", {"cmd": item.get("command", "")}),
                       responses.function_call_output(item_id, str(item.get("aggregated_output") or ""))]
    elif kind in ("file_change", "mcp_tool_call", "web_search", "todo_list"):
        conv.items += [responses.function_call(item_id, kind, {k: v for k, v in item.items() if k not in ("id", "type")}),
                       responses.function_call_output(item_id, str(item.get("status") or ""))]
    elif kind != "error":  # an error item is Codex telling the user something, not the model's output
        keep_unknown(conv, {"type": "item.completed", "item": item})


def _output(value: Any) -> str:
    """A tool's answer as text: a string, or the text parts of a content list."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(p.get("text", "") for p in value if isinstance(p, dict))
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return "" if value is None else json.dumps(value, ensure_ascii=False)
