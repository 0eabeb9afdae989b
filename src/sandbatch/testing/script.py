"""The scripted model's script: which assistant turns it plays per task, loaded from YAML or JSON.

Script (YAML or JSON)::

    tasks:                        # key: substring of the first user message ("re:" = regex)
      smoke__add-1:
        - reasoning_content: "Look first."          # optional, sent as reasoning
          content: "Listing the files."             # optional text
          tool_calls:
            - name: bash
              arguments: {command: "ls"}
              id: call_ls                           # optional (default: call_<turn>_<i>)
        - content: "Done."
      "re:fix the (parser|lexer)":
        turns: [...]
        final: {content: "All done."}               # per task, overrides the top level
    default: []                   # turns for a request matching no task
    replies:                      # key: substring of the last user message -> the one reply
      "[Assistant tool call]": {content: "Summary: ..."}   # (a harness's compaction request)
    final: {content: "Done."}     # reply once the turns are used up (mini-swe-agent: a
                                  # bash call running `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`)
    fallbacks:                    # a tool the request does not offer -> alternatives, in order
      bash:
        - {name: shell, rename: {command: cmd}}
    title: "Scripted task"        # answer to title requests (no tools, "title" in the system text)
    models: [scripted]            # ids listed by /v1/models
    max_model_len: 32768          # their context length there, as vLLM reports it (null: not reported)
    drop_history_reasoning: false # true: the template leaves reasoning out of the history
    stream_tokens: true           # false: streams carry no token ids or logprobs (plain answers do)

The turn played is the number of assistant turns already in the conversation
(template.assistant_turns), so the server keeps no state and concurrent rollouts do not
interfere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..core.errors import UserError


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any] | str
    id: str | None = None  # default: call_<turn>_<i> (a conversation restarted by a compaction repeats those)


@dataclass
class Turn:
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None


@dataclass
class Fallback:
    name: str
    rename: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskScript:
    key: str
    pattern: re.Pattern | None  # None: plain substring match on key
    turns: list[Turn]
    final: Turn | None = None

    def matches(self, text: str) -> bool:
        return bool(self.pattern.search(text)) if self.pattern else self.key in text


def _turn(raw: Any, where: str) -> Turn:
    if isinstance(raw, str):
        return Turn(content=raw)
    if not isinstance(raw, dict):
        raise UserError(f"{where}: a turn must be a mapping (content / reasoning_content / tool_calls) or a string")
    unknown = set(raw) - {"content", "reasoning_content", "tool_calls", "finish_reason"}
    if unknown:
        raise UserError(f"{where}: unknown turn key '{sorted(unknown)[0]}'; "
                        "allowed: content, reasoning_content, tool_calls, finish_reason")
    calls = []
    for i, call in enumerate(raw.get("tool_calls") or []):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise UserError(f"{where}.tool_calls[{i}]: needs a 'name' and 'arguments' (mapping or JSON string)")
        args = call.get("arguments", {})
        if not isinstance(args, (dict, str)):
            raise UserError(f"{where}.tool_calls[{i}].arguments: must be a mapping or a JSON string")
        calls.append(ToolCall(call["name"], args, str(call["id"]) if call.get("id") else None))
    return Turn(raw.get("content"), raw.get("reasoning_content"), calls, raw.get("finish_reason"))


@dataclass
class Script:
    tasks: list[TaskScript] = field(default_factory=list)
    default: list[Turn] = field(default_factory=list)
    replies: dict[str, Turn] = field(default_factory=dict)
    final: Turn = field(default_factory=lambda: Turn(content="Done."))
    fallbacks: dict[str, list[Fallback]] = field(default_factory=dict)
    title: str = "Scripted task"
    models: list[str] = field(default_factory=lambda: ["scripted"])
    max_model_len: int | None = 32768
    drop_history_reasoning: bool = False
    stream_tokens: bool = True

    @classmethod
    def load(cls, path: str | Path) -> "Script":
        path = Path(path)
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))  # YAML is a superset of JSON
        except OSError as exc:
            raise UserError(f"{path}: cannot read the model script ({exc.strerror})") from None
        except yaml.YAMLError as exc:
            raise UserError(f"{path}: the model script is not valid YAML/JSON ({exc})") from None
        return cls.from_dict(raw or {}, str(path))

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str = "script") -> "Script":
        if not isinstance(raw, dict):
            raise UserError(f"{where}: the top level must be a mapping with 'tasks'")
        allowed = {"tasks", "default", "replies", "final", "fallbacks", "title", "models", "max_model_len",
                   "drop_history_reasoning", "stream_tokens"}
        unknown = set(raw) - allowed
        if unknown:
            raise UserError(f"{where}: unknown key '{sorted(unknown)[0]}'; allowed: {', '.join(sorted(allowed))}")
        script = cls()
        for key, spec in (raw.get("tasks") or {}).items():
            loc = f"{where}: tasks.{key}"
            final = None
            if isinstance(spec, dict):
                final = _turn(spec["final"], f"{loc}.final") if spec.get("final") is not None else None
                spec = spec.get("turns") or []
            if not isinstance(spec, list):
                raise UserError(f"{loc}: give a list of turns, or a mapping with 'turns' (and 'final')")
            pattern = None
            if str(key).startswith("re:"):
                try:
                    pattern = re.compile(str(key)[3:])
                except re.error as exc:
                    raise UserError(f"{loc}: bad regular expression ({exc})") from None
            script.tasks.append(TaskScript(str(key), pattern,
                                           [_turn(t, f"{loc}[{i}]") for i, t in enumerate(spec)], final))
        script.default = [_turn(t, f"{where}: default[{i}]") for i, t in enumerate(raw.get("default") or [])]
        script.replies = {str(k): _turn(t, f"{where}: replies.{k}") for k, t in (raw.get("replies") or {}).items()}
        if raw.get("final") is not None:
            script.final = _turn(raw["final"], f"{where}: final")
        for name, alts in (raw.get("fallbacks") or {}).items():
            script.fallbacks[name] = [
                Fallback(a) if isinstance(a, str) else Fallback(a["name"], dict(a.get("rename") or {}),
                                                                dict(a.get("extra") or {}))
                for a in (alts if isinstance(alts, list) else [alts])
            ]
        script.title = str(raw.get("title", script.title))
        script.models = list(raw.get("models") or script.models)
        script.max_model_len = raw.get("max_model_len", script.max_model_len)
        script.drop_history_reasoning = bool(raw.get("drop_history_reasoning", False))
        script.stream_tokens = bool(raw.get("stream_tokens", True))
        return script

    def reply_for(self, last_user_text: str) -> Turn | None:
        """The reply given to a request whose last user message holds a `replies` key."""
        return next((t for k, t in self.replies.items() if k in last_user_text), None)

    def task_for(self, text: str) -> TaskScript | None:
        return next((t for t in self.tasks if t.matches(text)), None)
