"""Which model call produced which Responses item, and the calls' token data on the items.

The proxy notes what each call produced (`output` in model_calls.jsonl: digests of its
text and reasoning, and its tool calls as [call id, name, arguments digest]). An
assistant item (message, reasoning, function_call) is joined to the first call, from the
previous item's call on, with an unused output it matches: a function_call by its call
id, else by name and arguments (harnesses that number calls themselves, like pool); a
message or reasoning item by its text. Each output of a call is used once, so two turns
saying the same words join in order.

A joined call with token data puts them on the last item it produced, as NeMo Gym's
training items carry them (one item per model turn; a trainer reads the turns in order
and checks that each prompt extends the previous turn's prompt + generation):
`prompt_token_ids` (the whole prompt, rebuilt from the deltas), `generation_token_ids`,
`generation_log_probs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..proxy.tokens import arguments_digest, decode_prompts, digest
from .responses import item_text

ASSISTANT_ITEMS = ("message", "reasoning", "function_call")
TRAINING_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")


@dataclass
class Turn:
    """One answered model call and the items it produced."""

    row: Mapping[str, Any]
    slots: list[set[tuple]]
    items: list[dict[str, Any]] = field(default_factory=list)
    prompt: list[int] | None = None

    def training(self) -> dict[str, list] | None:
        """The NeMo Gym training fields of this turn, when its tokens came whole."""
        tokens = self.row.get("tokens") or {}
        generation, logprobs = tokens.get("generation") or [], tokens.get("logprobs") or []
        if self.prompt is None or not generation or len(generation) != len(logprobs):
            return None
        return {"prompt_token_ids": self.prompt, "generation_token_ids": list(generation),
                "generation_log_probs": list(logprobs)}


def _slots(output: Mapping[str, Any]) -> list[set[tuple]]:
    slots = [{("text", output["text"])}] if output.get("text") else []
    slots += [{("reasoning", output["reasoning"])}] if output.get("reasoning") else []
    for call_id, name, args in output.get("calls") or []:
        slots.append({("call", call_id), ("fn", name, args)} if call_id else {("fn", name, args)})
    return slots


def _keys(item: Mapping[str, Any]) -> set[tuple]:
    kind = item.get("type")
    if kind == "function_call":
        return {("call", item.get("call_id")), ("fn", item.get("name"), arguments_digest(item.get("arguments") or "{}"))}
    text = item_text(dict(item))
    return {("text" if kind == "message" else "reasoning", digest(text))} if text.strip() else set()


def join(items: Iterable[dict[str, Any]], calls: Iterable[Mapping[str, Any]]) -> tuple[list[Turn], int]:
    """(the answered calls as turns with their items, how many assistant items joined no call)."""
    rows = [c for c in calls if isinstance(c.get("output"), Mapping) and c["output"]]
    prompts = decode_prompts(rows)
    turns = [Turn(row, _slots(row["output"]), prompt=prompts.get(row.get("call"))) for row in rows]
    unmatched, start = 0, 0
    for item in items:
        if item.get("type") not in ASSISTANT_ITEMS:
            continue
        keys = _keys(item)
        found = None
        for j in range(start, len(turns)):
            slot = next((s for s in turns[j].slots if s & keys), None)
            if slot is not None:
                turns[j].slots.remove(slot)
                found = j
                break
        if found is None:
            unmatched += 1
            continue
        turns[found].items.append(item)
        start = found
    return turns, unmatched


def attach(items: list[dict[str, Any]], calls: Iterable[Mapping[str, Any]]) -> tuple[dict[str, int] | None, list[Turn]]:
    """Join `calls` to `items`, put each turn's training fields on its last item; return the
    counts for response.json (`token_join`; None when no call recorded its output, i.e.
    model.tokens was off or nothing came) and the turns."""
    turns, unmatched_items = join(items, calls)
    if not turns:
        return None, []
    with_tokens = 0
    for turn in turns:
        fields = turn.training() if turn.items else None
        if fields is not None:
            turn.items[-1].update(fields)
            with_tokens += 1
    continuing = [t for t in turns if (t.row.get("tokens") or {}).get("extends") is not None]
    counts = {
        "calls": len(turns),
        "matched_calls": sum(1 for t in turns if t.items),
        "unmatched_calls": sum(1 for t in turns if not t.items),
        "items": sum(1 for i in items if i.get("type") in ASSISTANT_ITEMS),
        "matched_items": sum(len(t.items) for t in turns),
        "unmatched_items": unmatched_items,
        "turns_with_tokens": with_tokens,
        # turns continuing a conversation, and those whose prompt did not extend the previous
        # turn's prompt + generation token for token (re-tokenisation drift)
        "continuing_turns": len(continuing),
        "drifted_turns": sum(1 for t in continuing if t.row["tokens"]["extends"] is False),
    }
    return counts, turns
