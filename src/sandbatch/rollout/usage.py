"""Token usage summed over a rollout's model calls (model_calls.jsonl, one JSON line per call).

The proxy writes the lines (sandbatch.proxy); usage there is already normalised by
`normalize_usage` (contracts/model_calls.py), so Chat and Responses backends sum alike.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

from ..contracts.model_calls import MODEL_ENDPOINTS, int_or_zero, iter_calls
from ..contracts.response import Usage
from . import responses

USAGE_KEYS = ("prompt_tokens", "completion_tokens", "reasoning_tokens", "cached_tokens", "total_tokens")


def is_model_call(row: Mapping[str, Any]) -> bool:
    """A call that generates tokens; the others (/models, ...) are recorded but not counted."""
    return row.get("endpoint", "chat") in MODEL_ENDPOINTS  # no endpoint: another writer


@dataclass
class CallTotals:
    """A model_calls.jsonl summed (summarize_usage)."""

    calls: int = 0  # model calls answered or refused
    failed_calls: int = 0  # status >= 400 or no status
    refused_calls: int = 0  # by the per-rollout caps
    calls_without_usage: int = 0  # answered 2xx without a usage object
    other_requests: int = 0  # e.g. /models
    latency_s: float = 0.0
    # the USAGE_KEYS, summed
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    cached_tokens: int = 0
    total_tokens: int = 0


def summarize_usage(path: str | os.PathLike) -> CallTotals:
    """Sum a model_calls.jsonl: token totals plus call counts. A missing file sums to zero."""
    out = CallTotals()
    for row in iter_calls(path):
        if not is_model_call(row):
            out.other_requests += 1
            continue
        out.calls += 1
        status = row.get("status")
        if not isinstance(status, int) or status >= 400:
            out.failed_calls += 1
        if row.get("refused"):
            out.refused_calls += 1
        out.latency_s += float(row.get("latency_s") or 0.0)
        usage = row.get("usage")
        if isinstance(usage, dict):  # normalised by the proxy: the USAGE_KEYS
            for key in USAGE_KEYS:
                setattr(out, key, getattr(out, key) + int_or_zero(usage.get(key)))
        elif isinstance(status, int) and status < 400:
            out.calls_without_usage += 1
    out.latency_s = round(out.latency_s, 6)
    return out


def summarize(totals: CallTotals) -> Usage:
    """Responses-style usage of the model calls `summarize_usage` summed (zeros when there were none)."""
    return Usage.model_validate({**responses.usage(totals.prompt_tokens, totals.completion_tokens,
                                                   totals.cached_tokens, totals.reasoning_tokens),
                                 "model_calls": totals.calls})
