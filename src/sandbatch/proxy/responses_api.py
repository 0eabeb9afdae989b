"""OpenAI's Responses API on a Chat Completions upstream (`model.proxy.responses: translate`).

vLLM and SGLang serve /v1/responses, but their answers carry logprobs for the message text
only: the ids of the reasoning and the tool calls a turn also generated are lost, so the
next turn's prompt (which holds them) cannot be checked against the previous turn's prompt
+ generation and a trainer must mask it. A Chat Completions answer carries the ids of the
whole completion (`token_ids`, and `logprobs.content` over every generated token), so with
`translate` each Responses call becomes one Chat call upstream and its answer a Responses
answer, and every turn of a Responses client (Codex) keeps its ids. Pure functions on decoded
JSON, tested without any network.

Request: `instructions` becomes the system message; input messages keep their role
(`developer` becomes `system`, which every chat template knows), their text parts joined as
a string, images as `image_url` parts; a run of assistant-side items (reasoning, assistant
message, function_call, custom_tool_call) becomes one assistant message (`reasoning_content`,
`content`, `tool_calls` with the call ids kept), in the order a chat template renders and
the model generates them; `function_call_output` / `custom_tool_call_output` become `tool`
messages. Function tools become Chat functions; a custom (freeform) tool a function of one
string argument `input`, its calls turned back into `custom_tool_call` items. Other items
and hosted tools (web search, ...) are left out and named in the record, as are `reasoning`
(the effort), `text`, `store`, `include` and `previous_response_id` (the proxy keeps no
state: a client sends its whole history, as Codex does with `store: false`).

Answer: reasoning (`reasoning_content` / `reasoning`) becomes a reasoning item (its text as
the summary, as the Responses clients show it), the text a message, each tool call a
function_call (or custom_tool_call) with the upstream's id; `finish_reason: length` makes
the response `incomplete`.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from .messages import CHAT_TOOL_CHOICE

_ASSISTANT_ITEMS = ("reasoning", "function_call", "custom_tool_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def _text(content: Any) -> str:
    """The text of a string or of a list of parts (input_text, output_text, summary_text, ...)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _content(content: Any) -> str | list[dict[str, Any]]:
    """A message's content for Chat: its text, or text and image parts when it has images."""
    if not isinstance(content, list):
        return _text(content)
    images = [p for p in content if isinstance(p, dict) and p.get("type") == "input_image"]
    if not images:
        return _text(content)
    parts: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "input_image" and (part.get("image_url") or part.get("file_id")):
            parts.append({"type": "image_url", "image_url": {"url": part.get("image_url") or part.get("file_id")}})
        elif isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
    return parts


def _arguments(item: dict[str, Any]) -> str:
    if item.get("type") == "custom_tool_call":  # a freeform tool: its one string argument
        return json.dumps({"input": item.get("input") or ""}, ensure_ascii=False)
    return item.get("arguments") if isinstance(item.get("arguments"), str) else json.dumps(item.get("arguments") or {})


def to_chat(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Responses request as a Chat Completions request; and what the translation left out."""
    messages: list[dict[str, Any]] = []
    dropped: list[str] = []
    if _text(body.get("instructions")):
        messages.append({"role": "system", "content": _text(body["instructions"])})
    items = body.get("input")
    items = [{"role": "user", "content": items}] if isinstance(items, str) else items or []
    turn: dict[str, Any] | None = None  # the assistant message being built from a run of items

    def assistant() -> dict[str, Any]:
        nonlocal turn
        if turn is None:
            turn = {"role": "assistant", "content": None}
            messages.append(turn)
        return turn

    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "reasoning":
            text = _text(item.get("content")) or _text(item.get("summary"))
            if text:
                message = assistant()
                message["reasoning_content"] = message.get("reasoning_content", "") + text
        elif kind in ("function_call", "custom_tool_call"):
            assistant().setdefault("tool_calls", []).append({
                "id": str(item.get("call_id", "")), "type": "function",
                "function": {"name": str(item.get("name", "")), "arguments": _arguments(item)}})
        elif kind == "message" and item.get("role") == "assistant":
            message = assistant()
            message["content"] = (message["content"] or "") + _text(item.get("content"))
        elif kind in _OUTPUTS:
            turn = None
            messages.append({"role": "tool", "tool_call_id": str(item.get("call_id", "")),
                             "content": _text(item.get("output"))})
        elif kind == "message":
            turn = None
            role = "system" if item.get("role") == "developer" else str(item.get("role") or "user")
            messages.append({"role": role, "content": _content(item.get("content"))})
        else:  # item references, hosted tools' calls, ...: nothing a Chat upstream can take
            dropped.append(str(kind))
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    for ours, theirs in (("max_output_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p"),
                         ("parallel_tool_calls", "parallel_tool_calls")):
        if body.get(ours) is not None:
            chat[theirs] = body[ours]
    tools, tools_dropped = _tools(body.get("tools") or [])
    if tools:
        chat["tools"] = tools
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and choice.get("type") in ("function", "custom") and choice.get("name"):
            chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
        elif choice in CHAT_TOOL_CHOICE.values():  # Chat's names are Responses' too
            chat["tool_choice"] = choice
    left_out: dict[str, Any] = {}
    if dropped:
        left_out["items_dropped"] = dropped
    if tools_dropped:
        left_out["server_tools_dropped"] = tools_dropped
    unused = sorted(k for k in ("reasoning", "text", "previous_response_id") if body.get(k))
    if unused:
        left_out["fields_dropped"] = unused
    return chat, left_out


def _tools(tools: list[Any]) -> tuple[list[dict[str, Any]], list[str]]:
    out, dropped = [], []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "function":
            function = {"name": tool.get("name", ""), "parameters": tool.get("parameters") or {"type": "object"}}
            for key in ("description", "strict"):
                if tool.get(key) is not None:
                    function[key] = tool[key]
        elif tool.get("type") == "custom":  # freeform: the model writes the input as one string
            description = tool.get("description") or ""
            grammar = (tool.get("format") or {}).get("definition") if isinstance(tool.get("format"), dict) else None
            function = {"name": tool.get("name", ""), "description": description, "parameters": {
                "type": "object", "required": ["input"], "additionalProperties": False,
                "properties": {"input": {"type": "string", **({"description": f"Written in this grammar:\n{grammar}"}
                                                              if grammar else {})}}}}
        else:  # web search, file search, local shell, ...: the upstream cannot run them
            dropped.append(str(tool.get("name") or tool.get("type")))
            continue
        out.append({"type": "function", "function": function})
    return out, dropped


def custom_tools(body: dict[str, Any]) -> frozenset[str]:
    """The names of a Responses request's custom (freeform) tools."""
    return frozenset(t.get("name") for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "custom")


def from_chat(completion: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions answer as the Responses answer to `request` (the client's own body)."""
    choices = completion.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    output: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        output.append({"id": _id("rs"), "type": "reasoning", "summary": [{"type": "summary_text", "text": reasoning}]})
    if isinstance(message.get("content"), str) and message["content"]:
        output.append({"id": _id("msg"), "type": "message", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": message["content"], "annotations": []}]})
    custom = custom_tools(request)
    for call in message.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, dict) and isinstance(call.get("function"), dict) else {}
        name, arguments = str(fn.get("name") or ""), fn.get("arguments") or "{}"
        call_id = str(call.get("id") or _id("call"))
        if name in custom:
            try:
                value = json.loads(arguments).get("input", "")
            except (ValueError, AttributeError):
                value = arguments
            output.append({"id": _id("ctc"), "type": "custom_tool_call", "call_id": call_id, "name": name,
                           "input": value if isinstance(value, str) else json.dumps(value), "status": "completed"})
        else:
            output.append({"id": _id("fc"), "type": "function_call", "call_id": call_id, "name": name,
                           "arguments": arguments, "status": "completed"})
    usage = completion.get("usage") if isinstance(completion.get("usage"), dict) else {}
    prompt_details = usage.get("prompt_tokens_details") if isinstance(usage.get("prompt_tokens_details"), dict) else {}
    output_details = (usage.get("completion_tokens_details")
                      if isinstance(usage.get("completion_tokens_details"), dict) else {})
    incomplete = choice.get("finish_reason") == "length"
    return {
        "id": _id("resp"), "object": "response", "created_at": completion.get("created") or int(time.time()),
        "model": request.get("model") or completion.get("model"),
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None, "error": None,
        "output": output, "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "tool_choice": request.get("tool_choice", "auto"), "tools": request.get("tools") or [],
        "usage": {"input_tokens": usage.get("prompt_tokens") or 0,
                  "input_tokens_details": {"cached_tokens": prompt_details.get("cached_tokens") or 0},
                  "output_tokens": usage.get("completion_tokens") or 0,
                  "output_tokens_details": {"reasoning_tokens": output_details.get("reasoning_tokens") or 0},
                  "total_tokens": usage.get("total_tokens") or 0},
    }
