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

Segments: a harness that compacts its context (or otherwise rewrites its history) sends a
prompt that does not extend the previous turn's prompt + generation, so a rollout's turns
are cut into segments, each a chain a trainer can read in order (`segment` on each turn's
last item, from 0). A turn starts a new segment unless its prompt extends the previous
turn's prompt + generation token for token (where both have ids; else unless the request's
messages start with the previous request's). A turn is trusted when its ids came whole and
its prompt either extends the previous turn or is a clean new start (the previous
request's messages were rewritten, as a compaction does); a turn whose messages kept the
history but whose tokens do not extend it (re-tokenisation drift), or that cannot be
checked (the previous turn or either request's messages unrecorded), is not: it is marked
`trusted: false` and its training fields are left off, failing closed for a trainer that
reads only those (its ids stay in model_calls.jsonl).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..contracts.response import TokenJoin
from ..proxy.tokens import arguments_digest, decode_histories, decode_prompts, digest
from .responses import item_text

ASSISTANT_ITEMS = ("message", "reasoning", "function_call")
TRAINING_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
# why a turn starts a segment: the rollout's first turn, a rewritten history (trusted when
# its ids came), re-tokenisation drift or nothing to check against (untrusted)
START = ("first", "rewritten", "drift", "unverified")


@dataclass
class Turn:
    """One answered model call and the items it produced."""

    row: Mapping[str, Any]
    slots: list[set[tuple]]
    items: list[dict[str, Any]] = field(default_factory=list)
    prompt: list[int] | None = None
    history: list[int] | None = None  # digests of the request's messages
    segment: int | None = None
    start: str | None = None  # why it starts a segment (START); None: it continues the previous turn's
    trusted: bool = True

    def ids(self) -> dict[str, list] | None:
        """The NeMo Gym training fields of this turn, when its tokens came whole."""
        tokens = self.row.get("tokens") or {}
        generation, logprobs = tokens.get("generation") or [], tokens.get("logprobs") or []
        if self.prompt is None or not generation or len(generation) != len(logprobs):
            return None
        return {"prompt_token_ids": self.prompt, "generation_token_ids": list(generation),
                "generation_log_probs": list(logprobs)}

    def training(self) -> dict[str, list] | None:
        """The training fields a trainer gets: the ids of a trusted turn."""
        return self.ids() if self.trusted else None


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


def _extends(previous: Turn, turn: Turn) -> bool:
    """Whether `turn`'s prompt starts with `previous`'s prompt + generation, token for token
    (both with their ids)."""
    before, now = previous.ids(), turn.ids()
    if before is None or now is None:
        return False
    head = before["prompt_token_ids"] + before["generation_token_ids"]
    return now["prompt_token_ids"][:len(head)] == head


def _kept(previous: Turn, turn: Turn) -> bool | None:
    """Whether `turn`'s request holds `previous`'s messages first, unchanged (None: either's
    messages were not recorded)."""
    if previous.history is None or turn.history is None:
        return None
    return turn.history[:len(previous.history)] == previous.history


def mark_segments(turns: list[Turn]) -> int:
    """Number the segments of the turns that produced items, in order, and say which are
    trusted (see the module's doc); the number of segments."""
    previous: Turn | None = None
    segment = -1
    for turn in (t for t in turns if t.items):
        has_ids = turn.ids() is not None
        kept = _kept(previous, turn) if previous is not None else None
        if previous is None:
            turn.start, turn.trusted = "first", has_ids
        elif _extends(previous, turn):
            turn.start, turn.trusted = None, True
        elif kept is False:  # the history was rewritten (a compaction): a clean new start
            turn.start, turn.trusted = "rewritten", has_ids
        elif not has_ids:  # no ids to break the chain; its messages continue the previous turn's
            turn.start, turn.trusted = (None if kept else "unverified"), False
        else:  # the history was kept but the tokens do not extend it, or there is nothing to check
            turn.start = "drift" if kept and previous.ids() is not None else "unverified"
            turn.trusted = False
        segment += turn.start is not None
        turn.segment = segment
        previous = turn
    return segment + 1


def join(items: Iterable[dict[str, Any]], calls: Iterable[Mapping[str, Any]]) -> tuple[list[Turn], int]:
    """(the answered calls as turns with their items, how many assistant items joined no call)."""
    rows = [c for c in calls if isinstance(c.get("output"), Mapping) and c["output"]]
    prompts, histories = decode_prompts(rows), decode_histories(rows)
    turns = [Turn(row, _slots(row["output"]), prompt=prompts.get(row.get("call")),
                  history=histories.get(row.get("call"))) for row in rows]
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


def attach(items: list[dict[str, Any]], calls: Iterable[Mapping[str, Any]]) -> tuple[TokenJoin | None, list[Turn]]:
    """Join `calls` to `items`, put each turn's training fields on its last item; return the
    counts for response.json (`token_join`; None when no call recorded its output, i.e.
    model.tokens was off or nothing came) and the turns."""
    turns, unmatched_items = join(items, calls)
    if not turns:
        return None, []
    segments = mark_segments(turns)
    with_tokens = 0
    for turn in turns:
        if not turn.items:
            continue
        fields = turn.training()
        turn.items[-1].update({"segment": turn.segment, "trusted": turn.trusted, **(fields or {})})
        with_tokens += fields is not None
    continuing = [t for t in turns if (t.row.get("tokens") or {}).get("extends") is not None]
    joined = [t for t in turns if t.items]
    counts = TokenJoin(
        calls=len(turns),
        matched_calls=sum(1 for t in turns if t.items),
        unmatched_calls=sum(1 for t in turns if not t.items),
        items=sum(1 for i in items if i.get("type") in ASSISTANT_ITEMS),
        matched_items=sum(len(t.items) for t in turns),
        unmatched_items=unmatched_items,
        turns_with_tokens=with_tokens,
        # a rewritten history is no drift, nor is a call whose answer no item carries: a side
        # request such as a compaction's summary, whose ids reach no training field
        continuing_turns=len(continuing),
        drifted_turns=sum(1 for t in continuing
                          if t.items and t.row["tokens"]["extends"] is False and t.start != "rewritten"),
        segments=segments,
        rewritten_turns=sum(1 for t in joined if t.start == "rewritten"),
        untrusted_turns=sum(1 for t in joined if not t.trusted),
    )
    return counts, turns
