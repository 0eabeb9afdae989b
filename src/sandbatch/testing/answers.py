"""The scripted model's answers in the shapes of both APIs, as vLLM sends them: Chat
Completions (a completion, or its chunks) and Responses (a response, or its events), with
usage, and token ids and logprobs when the request asks for them the way vLLM is asked:
Chat `logprobs: true` (`logprobs.content`, one entry per generated token, streamed per
chunk) and `return_token_ids: true` (`prompt_token_ids`, per choice `token_ids`);
Responses `include: ["message.output_text.logprobs"]` (the text's logprobs),
`return_token_ids: true` (top-level `prompt_token_ids`) and
`return_tokens_as_token_ids: true` (logprob tokens written `token_id:N`).

Every usage object made is appended to `reported` ({prompt, completion}), for tests.
"""

from __future__ import annotations

from typing import Any, Iterable

from .template import Reply, logprob_items, split_evenly


def usage(reply: Reply, responses: bool, reported: list[dict[str, int]]) -> dict[str, Any]:
    p, c, r = reply.prompt_tokens, reply.completion_tokens, reply.reasoning_tokens
    reported.append({"prompt": p, "completion": c})
    if responses:
        return {"input_tokens": p, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": c,
                "output_tokens_details": {"reasoning_tokens": r}, "total_tokens": p + c}
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
            "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": r}}

# Chat Completions -------------------------------------------------------------------

def chat(reply: Reply, body: dict[str, Any], reported: list[dict[str, int]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.calls:
        message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                                 for i, n, a in reply.calls]
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": reply.finish_reason,
                              "logprobs": None}
    out: dict[str, Any] = {"id": "chatcmpl-scripted", "object": "chat.completion", "created": 0,
                           "model": reply.model, "choices": [choice], "usage": usage(reply, False, reported)}
    if body.get("logprobs"):
        choice["logprobs"] = {"content": logprob_items(reply.generated(), bool(body.get("return_tokens_as_token_ids")))}
    if body.get("return_token_ids"):
        out["prompt_token_ids"] = reply.prompt_ids
        choice["token_ids"] = [i for _, i in reply.generated()]
    return out

def chat_chunks(reply: Reply, body: dict[str, Any], reported: list[dict[str, int]],
                stream_tokens: bool = True) -> Iterable[tuple[str | None, dict]]:
    """vLLM's stream: the first chunk has prompt_token_ids, every chunk the ids and
    logprobs of the tokens it carries (asked for; `stream_tokens` false: none in a stream)."""
    ids = stream_tokens and bool(body.get("return_token_ids"))
    logprobs = stream_tokens and bool(body.get("logprobs"))
    as_ids = bool(body.get("return_tokens_as_token_ids"))

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
        for piece, tokens in zip(pieces, split_evenly(parts.get(key, []), len(pieces))):
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
                     "model": reply.model, "choices": [], "usage": usage(reply, False, reported)}
    yield None, "[DONE]"

# Responses --------------------------------------------------------------------------

def output(reply: Reply, logprobs: bool, as_ids: bool = False) -> list[dict[str, Any]]:
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

def response(reply: Reply, body: dict[str, Any], reported: list[dict[str, int]],
             status: str = "completed") -> dict[str, Any]:
    logprobs = "message.output_text.logprobs" in (body.get("include") or [])
    as_ids = bool(body.get("return_tokens_as_token_ids"))
    out = {"id": "resp_scripted", "object": "response", "created_at": 0, "status": status,
           "model": reply.model, "output": output(reply, logprobs, as_ids) if status == "completed" else [],
           "usage": usage(reply, True, reported) if status == "completed" else None,
           "parallel_tool_calls": True, "tool_choice": body.get("tool_choice", "auto"), "tools": []}
    if body.get("return_token_ids"):
        out["prompt_token_ids"] = reply.prompt_ids
    return out

def responses_events(reply: Reply, body: dict[str, Any],
                     reported: list[dict[str, int]]) -> Iterable[tuple[str, dict]]:
    final = response(reply, body, reported)
    yield "response.created", {"response": response(reply, body, reported, "in_progress")}
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
            for piece, logprobs in zip(pieces, split_evenly(part.get("logprobs") or [], len(pieces))):
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
