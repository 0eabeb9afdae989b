"""A finished answer as the event stream a streaming client expects.

With `model.tokens: on` the proxy makes a streamed call unstreamed upstream when the
stream would carry no token ids (a Responses stream never does; a Chat stream of a server
that sent none) and sends the answer back as these events: the agent gets the stream it
asked for, all at once when the answer is complete.
"""

from __future__ import annotations

import json
from typing import Any, Iterator


def _events(response: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    output = [item for item in response.get("output") or [] if isinstance(item, dict)]
    yield "response.created", {"response": {**response, "status": "in_progress", "output": [], "usage": None}}
    yield "response.in_progress", {"response": {**response, "status": "in_progress", "output": [], "usage": None}}
    for index, item in enumerate(output):
        kind, item_id = item.get("type"), item.get("id") or f"item_{index}"
        at = {"item_id": item_id, "output_index": index}
        added = {**item, "status": "in_progress"}
        if kind == "message":
            added["content"] = []
        elif kind == "function_call":
            added["arguments"] = ""
        elif kind == "reasoning":
            added["summary"] = []
        yield "response.output_item.added", {"output_index": index, "item": added}
        if kind == "message":
            for n, part in enumerate(item.get("content") or []):
                where = {**at, "content_index": n}
                empty = {**part, "text": ""} if part.get("type") == "output_text" else part
                if part.get("type") == "output_text":
                    empty["logprobs"] = []
                yield "response.content_part.added", {**where, "part": empty}
                if part.get("type") == "output_text":
                    logprobs = part.get("logprobs") or []
                    yield "response.output_text.delta", {**where, "delta": part.get("text", ""), "logprobs": logprobs}
                    yield "response.output_text.done", {**where, "text": part.get("text", ""), "logprobs": logprobs}
                yield "response.content_part.done", {**where, "part": part}
        elif kind == "function_call":
            yield "response.function_call_arguments.delta", {**at, "delta": item.get("arguments", "")}
            yield "response.function_call_arguments.done", {**at, "arguments": item.get("arguments", "")}
        elif kind == "reasoning":
            for n, part in enumerate(item.get("summary") or []):
                where = {**at, "summary_index": n}
                yield "response.reasoning_summary_part.added", {**where, "part": {"type": "summary_text", "text": ""}}
                yield "response.reasoning_summary_text.delta", {**where, "delta": part.get("text", "")}
                yield "response.reasoning_summary_text.done", {**where, "text": part.get("text", "")}
                yield "response.reasoning_summary_part.done", {**where, "part": part}
        yield "response.output_item.done", {"output_index": index, "item": item}
    final = {"completed": "response.completed", "incomplete": "response.incomplete"}.get(
        response.get("status"), "response.failed")
    yield final, {"response": response}


def responses_stream(response: dict[str, Any]) -> bytes:
    """The server-sent events of `response` (a Responses object), numbered from 0."""
    out = []
    for sequence, (kind, data) in enumerate(_events(response)):
        payload = json.dumps({"type": kind, "sequence_number": sequence, **data}, separators=(",", ":"),
                             ensure_ascii=False)
        out.append(f"event: {kind}\ndata: {payload}\n\n")
    return "".join(out).encode()


def _chunks(completion: dict[str, Any], usage: bool) -> Iterator[dict[str, Any]]:
    head = {k: completion.get(k) for k in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"
    for choice in completion.get("choices") or []:
        message = choice.get("message") or {}
        index = choice.get("index", 0)
        delta = {"role": "assistant", "content": message.get("content") or ""}
        for key in ("reasoning_content", "reasoning"):
            if message.get(key):
                delta[key] = message[key]
        yield {**head, "choices": [{"index": index, "delta": delta, "logprobs": choice.get("logprobs"),
                                    "finish_reason": None}]}
        for n, call in enumerate(message.get("tool_calls") or []):
            yield {**head, "choices": [{"index": index, "delta": {"tool_calls": [{**call, "index": n}]},
                                        "logprobs": None, "finish_reason": None}]}
        yield {**head, "choices": [{"index": index, "delta": {}, "logprobs": None,
                                    "finish_reason": choice.get("finish_reason")}]}
    if usage and completion.get("usage") is not None:
        yield {**head, "choices": [], "usage": completion["usage"]}


def chat_stream(completion: dict[str, Any], usage: bool = True) -> bytes:
    """The Chat Completions chunks of `completion` (a chat.completion object), then [DONE];
    a final usage chunk when `usage` (stream_options.include_usage was asked for)."""
    out = [f"data: {json.dumps(c, separators=(',', ':'), ensure_ascii=False)}\n\n" for c in _chunks(completion, usage)]
    return ("".join(out) + "data: [DONE]\n\n").encode()
