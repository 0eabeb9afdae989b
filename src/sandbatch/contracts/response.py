"""The parts of response.json (the convert step's record) that other steps read: its `usage`
and its `sandbatch` run data (the model's time, the token join counts, the feedback).

Each part is copied into the rollouts.jsonl row as the response had it: `AsGiven` writes
back only the keys it was given, so a row holds its response's keys whichever sandbatch
wrote the response (one from before a field was counted has no such key), while a reader
reads every field as an attribute (a field the response lacks reads as its default).
"""

from __future__ import annotations

from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, model_serializer


class AsGiven(BaseModel):
    """A record part written back with the keys it was read or built with, no others."""

    @model_serializer(mode="wrap")
    def _given_keys(self, handler: Any) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if k in self.model_fields_set}


class InputTokensDetails(AsGiven):
    cached_tokens: int = 0
    # required by openai-python's `Response` since 3.x; the model calls' cache writes are not counted
    cache_write_tokens: int = 0


class OutputTokensDetails(AsGiven):
    reasoning_tokens: int = 0


class Usage(AsGiven):
    """Responses usage, summed over a rollout's model calls (rollout.usage.summarize)."""

    input_tokens: int = 0
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens: int = 0
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int = 0
    model_calls: int = 0  # sandbatch's own: the calls summed (not in a Responses usage)


class TokenJoin(AsGiven):
    """How a rollout's model calls joined its items (rollout.token_join.attach): counts of
    calls, items and turns. The last three were counted later: None in a response written
    before (the viewer leaves them out)."""

    calls: int = 0
    matched_calls: int = 0
    unmatched_calls: int = 0
    items: int = 0  # the assistant items
    matched_items: int = 0
    unmatched_items: int = 0
    turns_with_tokens: int = 0
    # turns continuing a conversation, and those whose prompt did not extend the previous
    # turn's prompt + generation token for token though the history was kept (re-tokenisation drift)
    continuing_turns: int = 0
    drifted_turns: int = 0
    segments: int | None = None
    rewritten_turns: int | None = None
    untrusted_turns: int | None = None


class RunData(BaseModel):
    """response.json's `sandbatch`: the rollout's identity and what the conversion found (the
    step's own fields here; a harness's metadata rides along as extra fields)."""

    model_config = ConfigDict(extra="allow")

    unknown_events: int = 0  # events the converter did not recognise
    conversion_error: str | None = None  # the converter failed: no items
    model_s: float | None = None  # the model calls' latencies summed (metrics.json time_s)
    token_join: TokenJoin | None = None  # None: no call recorded its output (model.tokens off)
    feedback: list[dict[str, Any]] = Field(default_factory=list)  # [{after, text}]: what the harness told the agent

    @classmethod
    def of(cls, response: Mapping[str, Any]) -> "RunData":
        """The run data of a response.json object (empty for one without)."""
        return cls.model_validate(response.get("sandbatch") or {})
