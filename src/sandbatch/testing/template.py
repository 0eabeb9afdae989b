"""The conversation as the scripted model reads it, and its tokens.

Usage counts tokens: the conversation is rendered through a toy chat template (`<|role|>`
text `<|end|>` per message, tool calls as canonical JSON, the assistant's reasoning when the
history carries it back) and cut into 4-character tokens, each with a fixed id, so a prompt
extends the previous turn's prompt + generation token for token exactly when the agent sends
the history back as it was generated. `drop_history_reasoning: true` renders the history
without reasoning, as some real chat templates do (re-tokenisation drift). `logprob(id)` is
the logprob of a token, fixed per id. A `Reply` is one resolved assistant reply and its
tokens, ready for either API (answers.py).
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any, Iterable

CHARS_PER_TOKEN = 4


# --- reading requests --------------------------------------------------------------------

def content_text(content: Any) -> str:
    """Text of a message content: a string or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def request_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
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


def user_texts(messages: Iterable[dict[str, Any]]) -> list[str]:
    return [content_text(m.get("content")) for m in messages if m.get("role") == "user"]


def first_user_text(messages: Iterable[dict[str, Any]]) -> str:
    return next(iter(user_texts(messages)), "")


def last_user_text(messages: list[dict[str, Any]]) -> str:
    return next((content_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")


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
        return [f"<|tool|>{content_text(item.get('output'))}", END]
    if kind == "reasoning":
        text = content_text(item.get("summary")) or content_text(item.get("content"))
        return [] if drop_reasoning else [f"<think>{text}</think>"]
    if item.get("role") == "assistant":
        reasoning = "" if drop_reasoning else str(item.get("reasoning_content") or item.get("reasoning") or "")
        calls = [((c.get("function") or {}).get("name", ""), (c.get("function") or {}).get("arguments") or "{}")
                 for c in item.get("tool_calls") or [] if isinstance(c, dict)]
        return _assistant_segments(reasoning, content_text(item.get("content")), calls)[:-1]
    return [f"<|{item.get('role')}|>{content_text(item.get('content'))}", END]


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


def split_evenly(tokens: list, n: int) -> list[list]:
    """`tokens` in n consecutive groups (the last takes the remainder)."""
    size = len(tokens) // n if n else 0
    return [tokens[k * size:(k + 1) * size] if k < n - 1 else tokens[k * size:] for k in range(n)]
