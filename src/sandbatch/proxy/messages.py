"""Anthropic's Messages API on an OpenAI-compatible (Chat Completions) upstream.

Clients that speak only Messages (Claude Code) call the proxy's /v1/messages; with
`model.proxy.messages: translate` (the default) each call becomes one Chat Completions
call upstream and its answer a Messages answer. Pure functions on decoded JSON, so they
are tested without any network. Written here rather than taken from a library: litellm's
Anthropic adapter pulls in litellm's whole provider stack for ~200 lines of mapping, and
the mapping must keep tool call ids and texts exactly as the upstream sent them (the
token join matches the agent's items to the recorded calls by them).

Request: `system` (a string or text blocks) becomes the system message; a lone text block
becomes a string, text and image blocks otherwise content parts; `tool_use` blocks an assistant's `tool_calls` (ids kept),
`tool_result` blocks `tool` messages (placed before the rest of their user turn, as Chat
wants them right after the calls), `thinking` blocks the assistant's `reasoning_content`
(`redacted_thinking` has no open counterpart and is dropped); `tools` become functions
(server tools such as web search are dropped: the upstream cannot run them);
`tool_choice`, `stop_sequences`, `temperature`, `top_p`, `top_k`, `max_tokens` map to
their Chat names; `cache_control`, `metadata` and `thinking` (the budget) are dropped.

Answer: reasoning (`reasoning_content` / `reasoning`) becomes a `thinking` block, the text a
`text` block, each tool call a `tool_use` block with the upstream's id; `finish_reason`
maps to `stop_reason`. A streaming client's call is streamed upstream too and each Chat
chunk goes out as the Messages events it makes as it arrives (StreamTranslator:
message_start, content_block_start / _delta / _stop per block, message_delta with the
usage, message_stop); an answer that came whole (an upstream that does not stream, or the
token ids asked for from one whose streams lack them) goes out as the same sequence at once.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Iterable, Iterator

from ..core.util import json_object

# Chat finish_reason -> Messages stop_reason
_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
         "content_filter": "refusal"}
# Anthropic error types by HTTP status (what its clients branch on)
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}


def _text(content: Any) -> str:
    """The text of a string or a list of blocks (non-text blocks left out)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # joined as vLLM joins a message's text parts
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _image(block: dict[str, Any]) -> dict[str, Any] | None:
    source = block.get("source") if isinstance(block.get("source"), dict) else {}
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    elif source.get("type") == "url":
        url = source.get("url", "")
    else:
        return None
    return {"type": "image_url", "image_url": {"url": url}}


def _parts(blocks: list[Any]) -> list[dict[str, Any]]:
    parts = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            parts.append({"type": "text", "text": block.get("text", "")})
        elif block.get("type") == "image":
            image = _image(block)
            if image is not None:
                parts.append(image)
    return parts


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """One text block as a string, else the parts as they are (the server joins them its own
    way, as it would for a Chat client sending them)."""
    if len(parts) == 1 and parts[0]["type"] == "text":
        return parts[0]["text"]
    return parts


def _tool_result(block: dict[str, Any]) -> dict[str, Any]:
    content = block.get("content")
    parts = _parts(content) if isinstance(content, list) else [{"type": "text", "text": str(content or "")}]
    return {"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": _content(parts) if parts else ""}


def _user(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return [{"role": "user", "content": str(content or "")}]
    out = [_tool_result(b) for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    parts = _parts(content)
    if parts:
        out.append({"role": "user", "content": _content(parts)})
    return out


def _assistant(content: Any) -> dict[str, Any]:
    if not isinstance(content, list):
        return {"role": "assistant", "content": str(content or "")}
    message: dict[str, Any] = {"role": "assistant", "content": _text(content) or None}
    reasoning = "".join(b.get("thinking", "") for b in content if isinstance(b, dict) and b.get("type") == "thinking")
    if reasoning:
        message["reasoning_content"] = reasoning
    calls = [{"id": str(b.get("id", "")), "type": "function",
              "function": {"name": str(b.get("name", "")),
                           "arguments": json.dumps(b.get("input") or {}, ensure_ascii=False)}}
             for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
    if calls:
        message["tool_calls"] = calls
    return message


# Anthropic's tool_choice types as Chat Completions names them
CHAT_TOOL_CHOICE = dict(auto="auto", any="required", none="none")


def _tool_choice(choice: Any) -> Any:
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name", "")}}
    return CHAT_TOOL_CHOICE.get(kind)


def to_chat(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Messages request as a Chat Completions request; and what the translation left out."""
    messages: list[dict[str, Any]] = []
    system = _text(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant":
            messages.append(_assistant(message.get("content")))
        else:
            messages.extend(_user(message.get("content")))
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    # a stream is translated chunk by chunk (StreamTranslator), its usage in its last chunk
    chat.update({"stream": True, "stream_options": {"include_usage": True}} if body.get("stream") is True
                else {"stream": False})
    for ours, theirs in (("max_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p"),
                         ("top_k", "top_k"), ("stop_sequences", "stop")):
        if body.get(ours) is not None:
            chat[theirs] = body[ours]
    tools, dropped = [], []
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if "input_schema" not in tool:  # a server tool (web search, code execution, ...)
            dropped.append(str(tool.get("name") or tool.get("type")))
            continue
        function = {"name": tool.get("name", ""), "parameters": tool["input_schema"]}
        if tool.get("description"):
            function["description"] = tool["description"]
        tools.append({"type": "function", "function": function})
    if tools:
        chat["tools"] = tools
        choice = _tool_choice(body.get("tool_choice"))
        if choice is not None:
            chat["tool_choice"] = choice
        if isinstance(body.get("tool_choice"), dict) and body["tool_choice"].get("disable_parallel_tool_use"):
            chat["parallel_tool_calls"] = False
    left_out: dict[str, Any] = {}
    if dropped:
        left_out["server_tools_dropped"] = dropped
    if body.get("thinking") is not None:
        left_out["thinking_dropped"] = True
    return chat, left_out


def from_chat(completion: dict[str, Any], model: Any) -> dict[str, Any]:
    """A Chat Completions answer as a Messages answer for the model the client asked for."""
    choices = completion.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    blocks: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        blocks.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    if isinstance(message.get("content"), str) and message["content"]:
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, dict) and isinstance(call.get("function"), dict) else {}
        blocks.append({"type": "tool_use", "id": str(call.get("id") or ""), "name": str(fn.get("name") or ""),
                       "input": json_object(fn.get("arguments") or "{}", "arguments")})
    stop = _STOP.get(choice.get("finish_reason"), "end_turn")
    if any(b["type"] == "tool_use" for b in blocks):
        stop = "tool_use"
    # an id of its own per answer: Claude Code merges answers with the same id into one turn,
    # and some servers give every answer the same id
    return {"id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant",
            "model": model or completion.get("model"), "content": blocks, "stop_reason": stop,
            "stop_sequence": None, "usage": _usage(completion.get("usage"))}


def _events(message: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    usage = message["usage"]
    yield "message_start", {"message": {**message, "content": [], "stop_reason": None, "stop_sequence": None,
                                        "usage": {**usage, "output_tokens": 0}}}
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        empty = {"thinking": {"type": "thinking", "thinking": "", "signature": ""}, "text": {"type": "text", "text": ""},
                 "tool_use": {**block, "input": {}}}[kind]
        yield "content_block_start", {"index": index, "content_block": empty}
        if kind == "thinking":
            yield "content_block_delta", {"index": index, "delta": {"type": "thinking_delta", "thinking": block["thinking"]}}
            yield "content_block_delta", {"index": index, "delta": {"type": "signature_delta", "signature": ""}}
        elif kind == "text":
            yield "content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": block["text"]}}
        else:
            yield "content_block_delta", {"index": index, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}}
        yield "content_block_stop", {"index": index}
    yield "message_delta", {"delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                            "usage": {"output_tokens": usage["output_tokens"]}}
    yield "message_stop", {}


def _sse(events: Iterable[tuple[str, dict[str, Any]]]) -> bytes:
    return "".join(f"event: {kind}\ndata: {json.dumps({'type': kind, **data}, ensure_ascii=False)}\n\n"
                   for kind, data in events).encode()


def stream(message: dict[str, Any]) -> bytes:
    """The server-sent events of a finished Messages answer."""
    return _sse(_events(message))


def _usage(usage: Any) -> dict[str, int]:
    """Chat usage as Messages usage (cached prompt tokens apart, as Anthropic counts them)."""
    usage = usage if isinstance(usage, dict) else {}
    details = usage.get("prompt_tokens_details") if isinstance(usage.get("prompt_tokens_details"), dict) else {}
    cached = details.get("cached_tokens") or 0
    return {"input_tokens": (usage.get("prompt_tokens") or 0) - cached, "output_tokens":
            usage.get("completion_tokens") or 0, "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}


class StreamTranslator:
    """A streamed Chat answer translated to Messages events as its chunks arrive: `feed` the
    upstream's bytes as they come, send what it returns; `close` at the end of the stream.

    Blocks open in the order the deltas come (reasoning, text, each tool call), each closed
    when the next opens; a tool call's arguments go out as `input_json_delta`s of the text the
    model generated. The usage is known only at the end (the stream's usage chunk, asked for
    by to_chat), so `message_start` carries none and `message_delta` all of it.
    """

    def __init__(self, model: Any):
        self.model = model
        self._buffer = b""
        self._started = False
        self._block: tuple[str, Any] | None = None  # (kind, tool call index) of the open block
        self._index = -1
        self._finish: Any = None
        self._usage: Any = None
        self._tool_use = False

    def feed(self, data: bytes) -> bytes:
        self._buffer += data
        events: list[tuple[str, dict[str, Any]]] = []
        while True:
            cut = min((i for i in (self._buffer.find(b"\n\n"), self._buffer.find(b"\r\n\r\n")) if i >= 0),
                      default=-1)
            if cut < 0:
                return _sse(events)
            event, self._buffer = self._buffer[:cut], self._buffer[cut:].lstrip(b"\r\n")
            for line in event.splitlines():
                if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                    try:
                        chunk = json.loads(line[5:])
                    except ValueError:
                        continue
                    if isinstance(chunk, dict):
                        events += self._chunk(chunk)

    def close(self) -> bytes:
        events = self._start() + self._close_block()
        stop = "tool_use" if self._tool_use else _STOP.get(self._finish, "end_turn")
        usage = _usage(self._usage)
        events += [("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": usage}),
                   ("message_stop", {})]
        return _sse(events)

    def _start(self) -> list[tuple[str, dict[str, Any]]]:
        if self._started:
            return []
        self._started = True
        # an id of its own per answer (see from_chat)
        return [("message_start", {"message": {
            "id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": _usage(None)}})]

    def _close_block(self) -> list[tuple[str, dict[str, Any]]]:
        if self._block is None:
            return []
        events = []
        if self._block[0] == "thinking":
            events.append(("content_block_delta", {"index": self._index, "delta": {"type": "signature_delta",
                                                                                    "signature": ""}}))
        self._block = None
        return events + [("content_block_stop", {"index": self._index})]

    def _open(self, kind: str, key: Any, block: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        if self._block == (kind, key):
            return []
        events = self._close_block()
        self._index += 1
        self._block = (kind, key)
        return events + [("content_block_start", {"index": self._index, "content_block": block})]

    def _chunk(self, chunk: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        events = self._start()
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) not in (0, None):
                continue
            self._finish = choice.get("finish_reason") or self._finish
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                events += self._open("thinking", None, {"type": "thinking", "thinking": "", "signature": ""})
                events.append(("content_block_delta", {"index": self._index, "delta": {
                    "type": "thinking_delta", "thinking": reasoning}}))
            if isinstance(delta.get("content"), str) and delta["content"]:
                events += self._open("text", None, {"type": "text", "text": ""})
                events.append(("content_block_delta", {"index": self._index, "delta": {
                    "type": "text_delta", "text": delta["content"]}}))
            for call in delta.get("tool_calls") or ():
                if not isinstance(call, dict):
                    continue
                fn = call.get("function") if isinstance(call.get("function"), dict) else {}
                if call.get("id") or self._block is None or self._block[0] != "tool_use":
                    self._tool_use = True
                    events += self._open("tool_use", call.get("index", 0), {
                        "type": "tool_use", "id": str(call.get("id") or ""), "name": str(fn.get("name") or ""),
                        "input": {}})
                if fn.get("arguments"):
                    events.append(("content_block_delta", {"index": self._index, "delta": {
                        "type": "input_json_delta", "partial_json": fn["arguments"]}}))
        return events


def error(status: int, message: str) -> dict[str, Any]:
    """An Anthropic-style error body."""
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_message(data: bytes) -> str:
    """The message of an OpenAI-style (or any JSON) error body, else its text."""
    try:
        obj = json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")[:2000]
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return err["message"]
    return err if isinstance(err, str) else json.dumps(obj)[:2000]


def count_tokens(body: dict[str, Any]) -> int:
    """An estimate of a request's input tokens (~4 characters a token over its text), where
    the upstream's tokenizer endpoint is not configured (model.proxy.tokenize_url) or failed:
    the OpenAI API has none, and Claude Code uses the count only to decide when to compact."""
    chat, _ = to_chat(body)
    text = json.dumps(chat.get("messages"), ensure_ascii=False) + json.dumps(chat.get("tools") or [], ensure_ascii=False)
    return max(1, len(text) // 4)
