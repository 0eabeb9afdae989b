"""Token ids and logprobs of model calls (`model.tokens`), and how model_calls.jsonl keeps them.

Asking (`on`): `ask` adds to a call what vLLM-style servers take - Chat Completions
`logprobs: true`, `return_token_ids: true` and `return_tokens_as_token_ids: true` (the
generated ids then also come as the logprobs' tokens, from servers without
return_token_ids); Responses the `message.output_text.logprobs` include and the same two.

Reading: `TokenCollector` takes a response body or each event of its stream. Shapes
understood: `prompt_token_ids` at the top level or per choice (vLLM `return_token_ids`),
per choice `token_ids` (streamed: per chunk), `logprobs.content[] {token, logprob}`
(Chat; a `logprobs.reasoning_content[]` beside it counts first), `logprobs.tokens /
token_logprobs` (legacy completions), Responses
`output[].content[].logprobs[]` and `response.output_text.delta` events with `logprobs`,
and logprob tokens written `token_id:N` (vLLM `return_tokens_as_token_ids`), which give
the generated ids when no `token_ids` come. It also notes what the call produced (its
text, reasoning and tool calls, as digests), which the convert step joins to the items.

Keeping: `PromptLog` writes each call's prompt as a delta against an earlier call of the
rollout, the head of the conversation it continues. The `tokens` field of a model_calls.jsonl line::

    {"prompt": {"base": 3, "keep": 1840, "ids": [...]},  # the first `keep` ids of call 3's
                                                      # prompt + generation, then `ids`
     "generation": [...], "logprobs": [...],          # choice 0's generated ids, their logprobs
     "extends": true}

`base` is the recorded call whose prompt + generation shares the longest prefix with this
prompt, among the last calls of up to 8 conversations (null with keep 0: `ids` is the
whole prompt). `extends` says whether the prompt
starts with that call's whole prompt + generation, token for token (false: the history
was re-rendered differently, re-tokenisation drift); null for a conversation's first call
(no assistant turn in the request) and when no earlier call of it was recorded. `decode_prompts` rebuilds the full prompts.
"""

from __future__ import annotations

import hashlib
import json
import re
from array import array
from typing import Any, Iterable, Mapping

LOGPROBS_INCLUDE = "message.output_text.logprobs"
# what marks a stream event that may carry token data (model.tokens: auto parses only those)
MARKER = re.compile(rb'token_ids"|"logprobs": ?\[?\{')
TOKEN_FIELDS = ("logprobs", "top_logprobs", "return_token_ids", "return_tokens_as_token_ids")
_ID_PREFIX = "token_id:"


def ask(body: dict[str, Any], endpoint: str) -> dict[str, Any]:
    """Ask the upstream for token ids and logprobs the way `endpoint` takes them; returns what changed."""
    if endpoint in ("chat", "completions"):
        wanted = {"logprobs": True if endpoint == "chat" else (body.get("logprobs") or 1),
                  "return_token_ids": True, "return_tokens_as_token_ids": True}
    elif endpoint == "responses":
        include = list(body.get("include") or [])
        wanted = {"include": include if LOGPROBS_INCLUDE in include else include + [LOGPROBS_INCLUDE],
                  "return_token_ids": True, "return_tokens_as_token_ids": True}
    else:
        return {}
    changed = sorted(k for k, v in wanted.items() if body.get(k) != v)
    body.update(wanted)
    return {"tokens_requested": changed} if changed else {}


def digest(text: str) -> str:
    """A short digest of an output's text (whitespace at the ends ignored)."""
    return hashlib.sha256(text.strip().encode()).hexdigest()[:16]


def arguments_digest(arguments: Any) -> str:
    """A digest of tool-call arguments, the same however the JSON was spaced or ordered."""
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        text = str(arguments)
    return digest(text)


def _generated_id(token: Any) -> int | None:
    if isinstance(token, str) and token.startswith(_ID_PREFIX):
        try:
            return int(token[len(_ID_PREFIX):])
        except ValueError:
            return None
    return None


class TokenCollector:
    """Collects token ids, logprobs and the output's shape from a response or its stream events."""

    def __init__(self) -> None:
        self.prompt_token_ids: list[int] | None = None
        self.token_ids: list[int] = []
        self.logprob_tokens: list[Any] = []
        self.logprobs: list[float] = []
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}  # index -> {id, name, arguments}
        self._responses_deltas = False

    def _logprob_list(self, items: Any) -> None:
        if isinstance(items, list):
            for item in items:
                if isinstance(item, Mapping):
                    self.logprob_tokens.append(item.get("token"))
                    self.logprobs.append(item.get("logprob"))

    def add(self, body: Any) -> None:
        if not isinstance(body, Mapping):
            return
        if isinstance(body.get("prompt_token_ids"), list) and self.prompt_token_ids is None:
            self.prompt_token_ids = body["prompt_token_ids"]
        for choice in body.get("choices") or ():
            if isinstance(choice, Mapping) and choice.get("index", 0) in (0, None):
                self._choice(choice)
        kind = body.get("type")
        if kind == "response.output_text.delta":  # Responses stream; the completed event repeats them
            self._responses_deltas = True
            self._logprob_list(body.get("logprobs"))
        elif body.get("object") == "response" or kind in ("response.completed", "response.incomplete"):
            response = body.get("response", body)
            if isinstance(response, Mapping):
                if isinstance(response.get("prompt_token_ids"), list) and self.prompt_token_ids is None:
                    self.prompt_token_ids = response["prompt_token_ids"]
                self._response_output(response.get("output") or ())

    def _choice(self, choice: Mapping[str, Any]) -> None:
        if isinstance(choice.get("prompt_token_ids"), list) and self.prompt_token_ids is None:
            self.prompt_token_ids = choice["prompt_token_ids"]
        if isinstance(choice.get("token_ids"), list):
            self.token_ids.extend(choice["token_ids"])
        lp = choice.get("logprobs")
        if isinstance(lp, Mapping):
            if isinstance(lp.get("content"), list) or isinstance(lp.get("reasoning_content"), list):
                # servers that split them give the reasoning's first: it was generated first
                self._logprob_list(lp.get("reasoning_content"))
                self._logprob_list(lp.get("content"))
            elif isinstance(lp.get("tokens"), list):  # legacy completions
                self.logprob_tokens.extend(lp["tokens"])
                self.logprobs.extend(lp.get("token_logprobs") or [])
        message = choice.get("message") or choice.get("delta")
        if isinstance(message, Mapping):
            if isinstance(message.get("content"), str):
                self.text.append(message["content"])
            reasoning = message.get("reasoning_content") or message.get("reasoning")
            if isinstance(reasoning, str):
                self.reasoning.append(reasoning)
            for n, call in enumerate(message.get("tool_calls") or ()):
                if not isinstance(call, Mapping):
                    continue
                index = call.get("index", n) if isinstance(call.get("index", n), int) else n
                entry = self.calls.setdefault(index, {"id": None, "name": "", "arguments": ""})
                fn = call.get("function") if isinstance(call.get("function"), Mapping) else {}
                entry["id"] = call.get("id") or entry["id"]
                entry["name"] += fn.get("name") or ""
                entry["arguments"] += fn.get("arguments") or ""
        elif isinstance(choice.get("text"), str):  # legacy completions
            self.text.append(choice["text"])

    def _response_output(self, output: Iterable[Any]) -> None:
        for item in output:
            if not isinstance(item, Mapping):
                continue
            kind = item.get("type")
            if kind == "message":
                for part in item.get("content") or ():
                    if isinstance(part, Mapping):
                        self.text.append(part.get("text") or "")
                        if not self._responses_deltas:
                            self._logprob_list(part.get("logprobs"))
            elif kind == "reasoning":
                for part in (item.get("summary") or item.get("content") or ()):
                    if isinstance(part, Mapping):
                        self.reasoning.append(part.get("text") or "")
            elif kind == "function_call":
                self.calls[len(self.calls)] = {"id": item.get("call_id"), "name": item.get("name") or "",
                                               "arguments": item.get("arguments") or ""}

    def output(self) -> dict[str, Any]:
        """What the call produced, for the join with the items: digests of its text and
        reasoning, and its tool calls as [call id, name, arguments digest]."""
        out: dict[str, Any] = {}
        text, reasoning = "".join(self.text), "".join(self.reasoning)
        if text.strip():
            out["text"] = digest(text)
        if reasoning.strip():
            out["reasoning"] = digest(reasoning)
        calls = [[c["id"], c["name"], arguments_digest(c["arguments"] or "{}")]
                 for _, c in sorted(self.calls.items())]
        if calls:
            out["calls"] = calls
        return out

    def generation(self) -> list[int] | None:
        """The generated ids: `token_ids`, else ids written into the logprob tokens."""
        if self.token_ids:
            return list(self.token_ids)
        ids = [_generated_id(t) for t in self.logprob_tokens]
        return ids if ids and all(i is not None for i in ids) else None  # type: ignore[return-value]


def _lcp(a: bytes, b: bytes) -> int:
    """Length in bytes of the longest common prefix of two byte strings."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo]; a[:hi] != b[:hi]
    ma, mb = memoryview(a), memoryview(b)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ma[lo:mid] == mb[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class PromptLog:
    """The heads of the rollout's conversations (their last call's prompt + generation), to
    write each new prompt as a delta.

    A call that continues a head (its prompt holds at least the head's whole prompt)
    replaces it, so one head stands for a whole conversation however many turns it has;
    `keep` heads are kept (interleaved conversations: the agent's, a title request, sub-
    agents), as 8-byte integers: 256 KB per 32k tokens, bounded however long the rollout.
    """

    def __init__(self, keep: int = 8):
        self.keep = keep
        self._heads: list[tuple[int, bytes, int]] = []  # (call number, prompt + generation, prompt length)

    def record(self, call: int, prompt: list[int] | None, generation: list[int] | None,
               logprobs: list[float] | None, continuing: bool) -> dict[str, Any] | None:
        """The `tokens` field for call number `call`; None when nothing came."""
        if prompt is None and not generation and not logprobs:
            return None
        out: dict[str, Any] = {}
        if prompt is not None:
            out["prompt"], extends = self.delta(call, prompt, generation or [])
            out["extends"] = extends if continuing else None
        out["generation"] = generation or []
        out["logprobs"] = logprobs or []
        return out

    def delta(self, call: int, ids: list[int], tail: list[int] = ()) -> tuple[dict[str, Any], bool | None]:
        """`ids` as a delta against the head sharing the longest prefix with it ({base, keep,
        ids}), and whether it starts with that head whole (None: no head); call number `call`
        with `ids` + `tail` becomes a head."""
        packed = array("q", ids).tobytes()
        head, keep = None, 0
        for entry in reversed(self._heads):
            common = _lcp(entry[1], packed) // 8
            if common > keep:
                head, keep = entry, common
        if head is not None and keep >= head[2]:
            self._heads.remove(head)  # continued: this call is the conversation's head now
        self._heads.append((call, packed + array("q", tail).tobytes(), len(ids)))
        del self._heads[:-self.keep]
        return {"base": head and head[0], "keep": keep, "ids": ids[keep:]}, \
            (keep == len(head[1]) // 8 if head is not None else None)


def _decode(calls: Iterable[Mapping[str, Any]], field: str) -> dict[int, list[int]]:
    """Call number -> its whole sequence, rebuilt from the deltas in each line's `field`
    ("prompt": `tokens.prompt`, followed in its head by the generation; "history")."""
    full: dict[int, list[int]] = {}  # call -> the head it left (prompt + generation)
    whole: dict[int, list[int]] = {}
    for row in calls:
        tokens = row.get("tokens") if field == "prompt" and isinstance(row.get("tokens"), Mapping) else None
        delta = (tokens or {}).get("prompt") if field == "prompt" else row.get(field)
        number = row.get("call")
        if not isinstance(delta, Mapping) or number is None:
            continue
        base = full.get(delta.get("base")) if delta.get("base") is not None else []
        if base is None:  # its base is not in the file (a truncated record): unknown
            continue
        whole[number] = base[:delta.get("keep", 0)] + list(delta.get("ids") or [])
        full[number] = whole[number] + list((tokens or {}).get("generation") or [])
    return whole


def decode_prompts(calls: Iterable[Mapping[str, Any]]) -> dict[int, list[int]]:
    """Call number -> its full prompt ids, rebuilt from the deltas of model_calls.jsonl lines."""
    return _decode(calls, "prompt")


def decode_histories(calls: Iterable[Mapping[str, Any]]) -> dict[int, list[int]]:
    """Call number -> the digests of its request's messages (`history`), rebuilt from the deltas."""
    return _decode(calls, "history")


def continuing(body: Mapping[str, Any]) -> bool:
    """Whether a request continues a conversation: it holds an assistant turn."""
    items = body.get("messages") if isinstance(body.get("messages"), list) else body.get("input")
    if not isinstance(items, list):
        return False
    return any(isinstance(m, Mapping) and (m.get("role") == "assistant" or m.get("type") in ("function_call", "reasoning"))
               for m in items)


_VOLATILE = frozenset({"cache_control", "providerOptions", "provider_options"})


def _canonical(value: Any) -> Any:
    """A message as compared across turns: cache markers left out (a harness moves them from
    turn to turn) and tool-call arguments parsed (however the JSON was spaced or ordered)."""
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if key in _VOLATILE:
                continue
            if key in ("arguments", "input") and isinstance(item, str):
                try:
                    item = json.loads(item)
                except ValueError:
                    pass
            out[key] = _canonical(item)
        return out
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def history(body: Mapping[str, Any]) -> list[int]:
    """The request's conversation as one digest per message (its system prompt first: Chat
    and Messages `system`, Responses `instructions`), 48-bit integers, so that a harness
    rewriting its history (a compaction) shows as a list that does not start with the
    previous turn's."""
    items = body.get("messages") if isinstance(body.get("messages"), list) else body.get("input")
    items = [{"role": "user", "content": items}] if isinstance(items, str) else list(items or [])
    system = body.get("system", body.get("instructions"))
    if system:
        items = [{"role": "system", "content": system}] + items
    return [int(digest(json.dumps(_canonical(m), sort_keys=True, ensure_ascii=False))[:12], 16) for m in items]
