"""Builders for OpenAI Responses output items and the response.json object.

Every harness converter produces items through these functions, so the item shapes are
written in one place.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from ..contracts.response import InputTokensDetails, OutputTokensDetails, Usage


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def message(text: str) -> dict[str, Any]:
    return {"id": _id("msg"), "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def reasoning(text: str) -> dict[str, Any]:
    return {"id": _id("rs"), "type": "reasoning", "summary": [{"type": "summary_text", "text": text}],
            "content": [{"type": "reasoning_text", "text": text}]}


def function_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": _id("fc"), "type": "function_call", "call_id": call_id, "name": name,
            "arguments": args, "status": "completed"}


def function_call_output(call_id: str, output: Any) -> dict[str, Any]:
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    return {"id": _id("fco"), "type": "function_call_output", "call_id": call_id, "output": text,
            "status": "completed"}


def user_message(text: str) -> dict[str, Any]:
    """A Responses input message from the user (the task prompt, as `input` holds it)."""
    return {"role": "user", "content": text, "type": "message"}


def input_text(items: list[dict[str, Any]]) -> str:
    """The text of Responses input messages (a string content or its text parts), one after another."""
    out = []
    for it in items:
        content = it.get("content")
        out.append(content if isinstance(content, str) else
                   "\n".join(p.get("text", "") for p in content or [] if isinstance(p, dict)))
    return "\n\n".join(out)


def item_text(item: dict[str, Any]) -> str:
    """The text of a message (its content parts) or of a reasoning item (its summary)."""
    parts = (item.get("summary") or item.get("content") or []) if item["type"] == "reasoning" else item.get("content") or []
    return "\n".join(p.get("text", "") for p in parts if isinstance(p, dict))


def inline_think(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fold each reasoning item into the next message as `<think>...</think>` (older consumers)."""
    out: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    for item in items:
        if item["type"] == "reasoning":
            pending.append(item)
            continue
        if item["type"] == "message" and pending:
            part = item["content"][0]
            texts = [r["summary"][0]["text"] if r.get("summary") else "" for r in pending]
            part["text"] = f"<think>\n{chr(10).join(texts)}\n</think>\n\n{part['text']}"
            pending = []
        out.append(item)
    return out + pending  # reasoning after the last message has none to fold into: kept as it is


def usage(input_tokens: int = 0, output_tokens: int = 0, cached_tokens: int = 0,
          reasoning_tokens: int = 0) -> dict[str, Any]:
    """Responses usage. `cache_write_tokens` (required by openai-python's `Response` since
    3.x) is 0: the model calls' cache writes are not counted."""
    return Usage(input_tokens=input_tokens,
                 input_tokens_details=InputTokensDetails(cached_tokens=cached_tokens, cache_write_tokens=0),
                 output_tokens=output_tokens, output_tokens_details=OutputTokensDetails(reasoning_tokens=reasoning_tokens),
                 total_tokens=input_tokens + output_tokens).model_dump()  # no model_calls: a Responses usage


# the run's identity, as strings, in the OpenAI `metadata` (string to string, at most 16 pairs)
METADATA_KEYS = ("run", "task_id", "instance_id", "repeat", "harness", "status", "failure_class")


def response(items: list[dict[str, Any]], usage_: dict[str, Any], model: str, status: str,
             run: dict[str, Any], created_at: int | None = None, instructions: str | None = None,
             input_: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A Responses object that OpenAI's `Response` and NeMo Gym's `NeMoGymResponse` accept.

    `instructions`: the system prompt the agent's model got (None when the harness does not
    record it); `input_`: the input items of the conversation's first turn (the task prompt
    as a user message), as a request's `input` holds them.

    `run` (structured: counts, lists, the harness's own fields) goes to a field of its own,
    `sandbatch`; `metadata` holds its identity keys as strings. The agent's tool list is not
    recorded: `tools`, `tool_choice` and `parallel_tool_calls` carry the Responses defaults.
    `created_at`: Unix seconds (default: now)."""
    metadata = {k: str(run[k]) for k in METADATA_KEYS if run.get(k) is not None}
    return {"id": _id("resp"), "object": "response", "created_at": int(time.time()) if created_at is None else created_at,
            "model": model, "status": status, "instructions": instructions, "input": input_ or [],
            "output": items, "usage": usage_, "tools": [], "tool_choice": "auto", "parallel_tool_calls": True,
            "metadata": metadata, "sandbatch": run}
