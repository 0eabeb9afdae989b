"""A deterministic OpenAI-compatible model server driven by a per-task script (a test tool).

For tests and demos of harnesses without a real model; a run never uses it: Chat Completions (with tool
calls, streamed or not), Responses (streamed or not) and /v1/models.

    sandbatch-scripted-model --script SCRIPT.yaml --port 8011 [--record calls.jsonl]

Script (YAML or JSON)::

    tasks:                        # key: substring of the first user message ("re:" = regex)
      smoke__add-1:
        - reasoning_content: "Look first."          # optional, sent as reasoning
          content: "Listing the files."             # optional text
          tool_calls:
            - name: bash
              arguments: {command: "ls"}
        - content: "Done."
      "re:fix the (parser|lexer)":
        turns: [...]
        final: {content: "All done."}               # per task, overrides the top level
    default: []                   # turns for a request matching no task
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

The turn is the number of assistant turns already in the conversation, so the server
keeps no state and concurrent rollouts do not interfere. Usage counts tokens: the
conversation is rendered through a toy chat template (`<|role|>` text `<|end|>` per
message, tool calls as canonical JSON, the assistant's reasoning when the history carries
it back) and cut into 4-character tokens, each with a fixed id, so a prompt extends the
previous turn's prompt + generation token for token exactly when the agent sends the
history back as it was generated. `drop_history_reasoning: true` renders the history
without reasoning, as some real chat templates do (re-tokenisation drift).

Token ids and logprobs come when asked for the way vLLM is asked: Chat `logprobs: true`
(`logprobs.content`, one entry per generated token, streamed per chunk) and
`return_token_ids: true` (`prompt_token_ids`, per choice `token_ids`); Responses
`include: ["message.output_text.logprobs"]` (the text's logprobs), `return_token_ids: true`
(top-level `prompt_token_ids`) and `return_tokens_as_token_ids: true` (logprob tokens
written `token_id:N`). `logprob(id)` is the logprob of a token, fixed per id.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import zlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml
from aiohttp import web

from ..core.errors import UserError
from ..proxy.core import split_path
from ..proxy.server import ServerThread, catch_all, listen

CHARS_PER_TOKEN = 4


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any] | str


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
        calls.append(ToolCall(call["name"], args))
    return Turn(raw.get("content"), raw.get("reasoning_content"), calls, raw.get("finish_reason"))


@dataclass
class Script:
    tasks: list[TaskScript] = field(default_factory=list)
    default: list[Turn] = field(default_factory=list)
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
        allowed = {"tasks", "default", "final", "fallbacks", "title", "models", "max_model_len",
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

    def task_for(self, text: str) -> TaskScript | None:
        return next((t for t in self.tasks if t.matches(text)), None)


# --- reading requests --------------------------------------------------------------------

def _text(content: Any) -> str:
    """Text of a message content: a string or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation as a list of items with a role or a type (Chat or Responses)."""
    if isinstance(body.get("messages"), list):
        return [m for m in body["messages"] if isinstance(m, dict)]
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    out = [{"role": "system", "content": body["instructions"]}] if isinstance(body.get("instructions"), str) else []
    return out + [m for m in (items or []) if isinstance(m, dict)]


def _is_assistant(item: dict[str, Any]) -> bool:
    return item.get("role") == "assistant" or item.get("type") in ("function_call", "reasoning")


def assistant_turns(messages: Iterable[dict[str, Any]]) -> int:
    """Assistant turns so far: runs of consecutive assistant items count once."""
    turns, previous = 0, False
    for item in messages:
        current = _is_assistant(item)
        if current and not previous:
            turns += 1
        previous = current
    return turns


def first_user_text(messages: Iterable[dict[str, Any]]) -> str:
    return next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")


def tool_names(body: dict[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
            if isinstance(fn.get("name"), str):
                names.append(fn["name"])
    return names


# --- the toy tokenizer and chat template ----------------------------------------------------

END = "<|end|>"


def tokenize(text: str) -> list[tuple[str, int]]:
    """(piece, id) per CHARS_PER_TOKEN characters; a piece's id depends on its text alone."""
    pieces = [text[i:i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN)]
    return [(p, zlib.crc32(p.encode()) % 50000 + 1) for p in pieces]


def _canonical(arguments: Any) -> str:
    """Tool-call arguments as the template renders them: parsed and re-encoded (sorted keys)."""
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return str(arguments)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _call_text(name: str, arguments: Any) -> str:
    return f'<tool>{{"name":{json.dumps(name)},"arguments":{_canonical(arguments)}}}</tool>'


def _assistant_segments(reasoning: str, content: str, calls: Iterable[tuple[str, Any]]) -> list[str]:
    """The texts of an assistant turn in the order the template renders (and the model generates) them."""
    texts = ([f"<think>{reasoning}</think>"] if reasoning else []) + ([content] if content else [])
    return texts + [_call_text(name, args) for name, args in calls] + [END]


def _history_segments(item: dict[str, Any], drop_reasoning: bool) -> list[str]:
    """One history item as template segments (Chat messages and Responses items alike); an
    assistant turn's END is added once per turn by render_prompt."""
    kind = item.get("type")
    if kind == "function_call":
        return [_call_text(str(item.get("name", "")), item.get("arguments") or "{}")]
    if kind == "function_call_output":
        return [f"<|tool|>{_text(item.get('output'))}", END]
    if kind == "reasoning":
        text = _text(item.get("summary")) or _text(item.get("content"))
        return [] if drop_reasoning else [f"<think>{text}</think>"]
    if item.get("role") == "assistant":
        reasoning = "" if drop_reasoning else str(item.get("reasoning_content") or item.get("reasoning") or "")
        calls = [((c.get("function") or {}).get("name", ""), (c.get("function") or {}).get("arguments") or "{}")
                 for c in item.get("tool_calls") or [] if isinstance(c, dict)]
        return _assistant_segments(reasoning, _text(item.get("content")), calls)[:-1]
    return [f"<|{item.get('role')}|>{_text(item.get('content'))}", END]


def render_prompt(messages: list[dict[str, Any]], drop_reasoning: bool = False) -> list[int]:
    """Prompt token ids: the history, each assistant turn opened by `<|assistant|>` and closed
    by END, then `<|assistant|>` (the generation prompt)."""
    ids: list[int] = []
    previous = False
    for item in messages:
        current = _is_assistant(item)
        if previous and not current:
            ids += _ids(END)
        if current and not previous:
            ids += _ids("<|assistant|>")
        for text in _history_segments(item, drop_reasoning):
            ids += _ids(text)
        previous = current
    return ids + (_ids(END) if previous else []) + _ids("<|assistant|>")


def _ids(text: str) -> list[int]:
    return [i for _, i in tokenize(text)]


@dataclass
class Reply:
    """One resolved assistant reply, ready for either API."""

    content: str
    reasoning: str
    calls: list[tuple[str, str, str]]  # (call id, tool name, arguments JSON)
    finish_reason: str
    prompt_ids: list[int]  # the rendered, tokenized conversation
    model: str

    def generation(self) -> list[tuple[str, list[tuple[str, int]]]]:
        """(part, its tokens) in generation order: "reasoning", "content", "call <i>", "end"."""
        names = (["reasoning"] if self.reasoning else []) + (["content"] if self.content else [])
        names += [f"call {i}" for i in range(len(self.calls))] + ["end"]
        texts = _assistant_segments(self.reasoning, self.content, [(n, a) for _, n, a in self.calls])
        return [(name, tokenize(text)) for name, text in zip(names, texts)]

    def generated(self) -> list[tuple[str, int]]:
        return [token for _, tokens in self.generation() for token in tokens]

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def completion_tokens(self) -> int:
        return len(self.generated())

    @property
    def reasoning_tokens(self) -> int:
        return sum(len(tokens) for name, tokens in self.generation() if name == "reasoning")

    def pieces(self, text: str, size: int = 16) -> list[str]:
        return [text[i:i + size] for i in range(0, len(text), size)]


def logprob(token_id: int) -> float:
    """The logprob the scripted model reports for a token: fixed per id, distinct across ids."""
    return -round((token_id % 997 + 1) / 1000, 3)


def logprob_items(tokens: list[tuple[str, int]], as_ids: bool = False) -> list[dict[str, Any]]:
    """logprobs.content entries (as_ids: the token written `token_id:N`, as vLLM's
    return_tokens_as_token_ids does)."""
    return [{"token": f"token_id:{i}" if as_ids else piece, "logprob": logprob(i), "bytes": list(piece.encode()),
             "top_logprobs": []} for piece, i in tokens]


def _split(tokens: list, n: int) -> list[list]:
    """`tokens` in n consecutive groups (the last takes the remainder)."""
    size = len(tokens) // n if n else 0
    return [tokens[k * size:(k + 1) * size] if k < n - 1 else tokens[k * size:] for k in range(n)]


# --- the server --------------------------------------------------------------------------

class ScriptedModel:
    """Serves a Script over HTTP: `app()` is the aiohttp.web application, `serve()` runs it in a thread."""

    def __init__(self, script: Script, record_path: str | Path | None = None):
        self.script = script
        self.record_path = Path(record_path) if record_path else None
        self.requests: list[dict[str, Any]] = []  # every request received, for in-process tests
        self.reported_usage: list[dict[str, int]] = []  # (prompt, completion) of every reply sent
        self._record = None

    def app(self) -> web.Application:
        return catch_all(self.handle, self.startup, self.shutdown)

    def serve(self, host: str = "127.0.0.1", port: int = 0) -> ServerThread:
        server = ServerThread(self.app(), host, port, name="scripted-model")
        server.start()
        return server

    async def startup(self) -> None:
        if self.record_path is not None:
            self.record_path.parent.mkdir(parents=True, exist_ok=True)
            self._record = open(self.record_path, "a", encoding="utf-8")

    async def shutdown(self) -> None:
        if self._record is not None:
            self._record.close()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            return _json(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
        entry = {"time": time.time(), "method": request.method, "path": request.path,
                 "headers": {k.lower(): v for k, v in request.headers.items()}, "body": body}
        self.requests.append(entry)
        if self._record is not None:
            self._record.write(json.dumps(entry) + "\n")
            self._record.flush()
        endpoint, _ = split_path(request.path)
        if endpoint == "models":
            return _json(200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": "sandbatch",
                 **({"max_model_len": self.script.max_model_len} if self.script.max_model_len else {})}
                for m in self.script.models]})
        if endpoint not in ("chat", "responses") or request.method != "POST" or not isinstance(body, dict):
            return _json(404, {"error": {"message": f"no such endpoint: {request.method} {request.path}",
                                         "type": "invalid_request_error"}})
        reply = self.reply(body)
        stream = body.get("stream") is True
        if endpoint == "chat":
            if stream:
                return await _sse(request, self._chat_chunks(reply, body))
            return _json(200, self._chat(reply, body))
        if stream:
            return await _sse(request, self._responses_events(reply, body))
        return _json(200, self._response(reply, body))

    # which reply ------------------------------------------------------------------------

    def reply(self, body: dict[str, Any]) -> Reply:
        messages = _messages(body)
        offered = tool_names(body)
        prompt_ids = render_prompt(messages, self.script.drop_history_reasoning)
        model = str(body.get("model") or self.script.models[0])
        system = "\n".join(_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
        if not offered and re.search(r"\btitle\b", system, re.IGNORECASE):
            return Reply(self.script.title, "", [], "stop", prompt_ids, model)
        index = assistant_turns(messages)
        task = self.script.task_for(first_user_text(messages))
        turns = task.turns if task else self.script.default
        if index < len(turns):
            turn = turns[index]
        else:
            turn = (task.final if task and task.final else None) or self.script.final
        calls = [self._resolve(call, offered, f"call_{index}_{i}") for i, call in enumerate(turn.tool_calls)]
        finish = turn.finish_reason or ("tool_calls" if calls else "stop")
        return Reply(turn.content or "", turn.reasoning_content or "", calls, finish, prompt_ids, model)

    def _resolve(self, call: ToolCall, offered: list[str], call_id: str) -> tuple[str, str, str]:
        """The call under a tool the request offers: the named one, else the first fallback offered."""
        name, args = call.name, call.arguments
        if offered and name not in offered:
            for alt in self.script.fallbacks.get(name, []):
                if alt.name in offered:
                    name = alt.name
                    if isinstance(args, dict):
                        args = {alt.rename.get(k, k): v for k, v in args.items()}
                        args.update(alt.extra)
                    break
        return call_id, name, args if isinstance(args, str) else json.dumps(args)

    def _usage(self, reply: Reply, responses: bool) -> dict[str, Any]:
        p, c, r = reply.prompt_tokens, reply.completion_tokens, reply.reasoning_tokens
        self.reported_usage.append({"prompt": p, "completion": c})
        if responses:
            return {"input_tokens": p, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": c,
                    "output_tokens_details": {"reasoning_tokens": r}, "total_tokens": p + c}
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
                "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": r}}

    # Chat Completions -------------------------------------------------------------------

    def _chat(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        if reply.calls:
            message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                                     for i, n, a in reply.calls]
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": reply.finish_reason,
                                  "logprobs": None}
        out: dict[str, Any] = {"id": "chatcmpl-scripted", "object": "chat.completion", "created": 0,
                               "model": reply.model, "choices": [choice], "usage": self._usage(reply, False)}
        if body.get("logprobs"):
            choice["logprobs"] = {"content": logprob_items(reply.generated(), bool(body.get("return_tokens_as_token_ids")))}
        if body.get("return_token_ids"):
            out["prompt_token_ids"] = reply.prompt_ids
            choice["token_ids"] = [i for _, i in reply.generated()]
        return out

    def _chat_chunks(self, reply: Reply, body: dict[str, Any]) -> Iterable[tuple[str | None, dict]]:
        """vLLM's stream: the first chunk has prompt_token_ids, every chunk the ids and
        logprobs of the tokens it carries (asked for)."""
        tokens = self.script.stream_tokens
        ids, logprobs, as_ids = tokens and bool(body.get("return_token_ids")), tokens and bool(body.get("logprobs")), \
            bool(body.get("return_tokens_as_token_ids"))

        def chunk(delta: dict[str, Any], finish: str | None = None, tokens=()) -> tuple[None, dict]:
            choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            if logprobs:
                choice["logprobs"] = {"content": logprob_items(list(tokens), as_ids)}
            if ids:
                choice["token_ids"] = [i for _, i in tokens]
            return None, {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0,
                          "model": reply.model, "choices": [choice]}

        parts = dict(reply.generation())
        first = chunk({"role": "assistant", "content": ""})
        if ids:
            first[1]["prompt_token_ids"] = reply.prompt_ids
        yield first
        for key, delta in (("reasoning", "reasoning_content"), ("content", "content")):
            text = getattr(reply, key)
            pieces = reply.pieces(text)
            for piece, tokens in zip(pieces, _split(parts.get(key, []), len(pieces))):
                yield chunk({delta: piece}, tokens=tokens)
        for index, (call_id, name, args) in enumerate(reply.calls):
            yield chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                         "function": {"name": name, "arguments": ""}}]}, tokens=parts[f"call {index}"])
            half = len(args) // 2
            for part in (args[:half], args[half:]):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
        yield chunk({}, reply.finish_reason, tokens=parts["end"])
        if (body.get("stream_options") or {}).get("include_usage"):
            yield None, {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0,
                         "model": reply.model, "choices": [], "usage": self._usage(reply, False)}
        yield None, "[DONE]"

    # Responses --------------------------------------------------------------------------

    def _output(self, reply: Reply, logprobs: bool, as_ids: bool = False) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if reply.reasoning:
            items.append({"id": "rs_scripted", "type": "reasoning",
                          "summary": [{"type": "summary_text", "text": reply.reasoning}]})
        if reply.content:
            part: dict[str, Any] = {"type": "output_text", "text": reply.content, "annotations": []}
            if logprobs:
                part["logprobs"] = logprob_items(dict(reply.generation())["content"], as_ids)
            items.append({"id": "msg_scripted", "type": "message", "role": "assistant", "status": "completed",
                          "content": [part]})
        for call_id, name, args in reply.calls:
            items.append({"id": f"fc_{call_id}", "type": "function_call", "call_id": call_id, "name": name,
                          "arguments": args, "status": "completed"})
        return items

    def _response(self, reply: Reply, body: dict[str, Any], status: str = "completed") -> dict[str, Any]:
        logprobs = "message.output_text.logprobs" in (body.get("include") or [])
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        out = {"id": "resp_scripted", "object": "response", "created_at": 0, "status": status,
               "model": reply.model, "output": self._output(reply, logprobs, as_ids) if status == "completed" else [],
               "usage": self._usage(reply, True) if status == "completed" else None,
               "parallel_tool_calls": True, "tool_choice": body.get("tool_choice", "auto"), "tools": []}
        if body.get("return_token_ids"):
            out["prompt_token_ids"] = reply.prompt_ids
        return out

    def _responses_events(self, reply: Reply, body: dict[str, Any]) -> Iterable[tuple[str, dict]]:
        final = self._response(reply, body)
        yield "response.created", {"response": self._response(reply, body, "in_progress")}
        for index, item in enumerate(final["output"]):
            empty = dict(item, status="in_progress")
            if item["type"] == "message":
                empty["content"] = []
            if item["type"] == "function_call":
                empty["arguments"] = ""
            yield "response.output_item.added", {"output_index": index, "item": empty}
            if item["type"] == "message":
                part = item["content"][0]
                yield "response.content_part.added", {"item_id": item["id"], "output_index": index,
                                                      "content_index": 0,
                                                      "part": {"type": "output_text", "text": "", "annotations": []}}
                pieces = reply.pieces(part["text"])
                for piece, logprobs in zip(pieces, _split(part.get("logprobs") or [], len(pieces))):
                    delta: dict[str, Any] = {"item_id": item["id"], "output_index": index, "content_index": 0,
                                             "delta": piece}
                    if "logprobs" in part:
                        delta["logprobs"] = logprobs
                    yield "response.output_text.delta", delta
                yield "response.output_text.done", {"item_id": item["id"], "output_index": index,
                                                    "content_index": 0, "text": part["text"]}
                yield "response.content_part.done", {"item_id": item["id"], "output_index": index,
                                                     "content_index": 0, "part": part}
            elif item["type"] == "function_call":
                args = item["arguments"]
                for part in (args[:len(args) // 2], args[len(args) // 2:]):
                    yield "response.function_call_arguments.delta", {"item_id": item["id"], "output_index": index,
                                                                     "delta": part}
                yield "response.function_call_arguments.done", {"item_id": item["id"], "output_index": index,
                                                                "arguments": args}
            yield "response.output_item.done", {"output_index": index, "item": item}
        yield "response.completed", {"response": final}


def _json(status: int, obj: Any) -> web.Response:
    return web.json_response(obj, status=status, dumps=lambda o: json.dumps(o, separators=(",", ":")))


async def _sse(request: web.Request, events: Iterable[tuple[str | None, Any]]) -> web.StreamResponse:
    """Send `events` as a server-sent event stream, one chunk per event."""
    out = web.StreamResponse(headers={"content-type": "text/event-stream", "cache-control": "no-cache"})
    await out.prepare(request)
    for sequence, (name, data) in enumerate(events):
        if isinstance(data, dict) and name is not None:
            data = {"type": name, "sequence_number": sequence, **data}
        payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        head = f"event: {name}\n" if name else ""
        await out.write(f"{head}data: {payload}\n\n".encode())
    await out.write_eof()
    return out


# --- command line -------------------------------------------------------------------------

async def _main(args: argparse.Namespace) -> None:
    model = ScriptedModel(Script.load(args.script), args.record)
    runner, port = await listen(model.app(), args.host, args.port)
    print(f"scripted model listening on http://{args.host}:{port}/v1", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sandbatch-scripted-model", description=__doc__.split("\n")[0])
    parser.add_argument("--script", required=True, help="YAML/JSON script: task key -> assistant turns")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (0 = a free one; printed on start)")
    parser.add_argument("--record", default=None, help="append every received request to this JSONL file")
    args = parser.parse_args(argv)
    try:
        asyncio.run(_main(args))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
