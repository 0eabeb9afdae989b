"""Token usage summed over a rollout's model calls (model_calls.jsonl, one JSON line per call).

The proxy writes the lines (sandbatch.proxy); usage there is already normalised by
`normalize_usage`, so Chat and Responses backends sum alike.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator, Mapping

from . import responses

USAGE_KEYS = ("prompt_tokens", "completion_tokens", "reasoning_tokens", "cached_tokens", "total_tokens")

# endpoints that generate tokens; the others (models, ...) are recorded but not counted as calls
MODEL_ENDPOINTS = frozenset({"chat", "responses", "completions"})


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def normalize_usage(usage: Any) -> dict[str, int] | None:
    """One shape for both APIs: {prompt, completion, reasoning, cached, total}_tokens.

    Chat: prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens,
    completion_tokens_details.reasoning_tokens. Responses: input_tokens, output_tokens,
    input_tokens_details.cached_tokens, output_tokens_details.reasoning_tokens.
    None when there is no usage object.
    """
    if not isinstance(usage, Mapping):
        return None
    if "input_tokens" in usage or "output_tokens" in usage:
        prompt = _int(usage.get("input_tokens"))
        completion = _int(usage.get("output_tokens"))
        in_details = usage.get("input_tokens_details") or {}
        out_details = usage.get("output_tokens_details") or {}
    else:
        prompt = _int(usage.get("prompt_tokens"))
        completion = _int(usage.get("completion_tokens"))
        in_details = usage.get("prompt_tokens_details") or {}
        out_details = usage.get("completion_tokens_details") or {}
    cached = _int(in_details.get("cached_tokens")) if isinstance(in_details, Mapping) else 0
    reasoning = _int(out_details.get("reasoning_tokens")) if isinstance(out_details, Mapping) else 0
    if not reasoning:
        reasoning = _int(usage.get("reasoning_tokens"))  # some servers put it at the top level
    total = _int(usage.get("total_tokens")) or prompt + completion
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "reasoning_tokens": reasoning,
        "cached_tokens": cached,
        "total_tokens": total,
    }


def usage_of(body: Any) -> dict[str, int] | None:
    """Usage of a response body or stream event: `usage`, or `response.usage` (Responses events)."""
    if not isinstance(body, Mapping):
        return None
    if isinstance(body.get("usage"), Mapping):
        return normalize_usage(body["usage"])
    inner = body.get("response")
    if isinstance(inner, Mapping) and isinstance(inner.get("usage"), Mapping):
        return normalize_usage(inner["usage"])
    return None


def iter_calls(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """The rows of a model_calls.jsonl, in order. A missing file has none; a truncated last
    line (a killed job) is skipped."""
    try:
        fh = open(path, encoding="utf-8")
    except FileNotFoundError:
        return
    with fh:
        for line in fh:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                yield row


def is_model_call(row: Mapping[str, Any]) -> bool:
    """A call that generates tokens; the others (/models, ...) are recorded but not counted."""
    return row.get("endpoint", "chat") in MODEL_ENDPOINTS  # no endpoint: another writer


def summarize_usage(path: str | os.PathLike) -> dict[str, Any]:
    """Sum a model_calls.jsonl: token totals plus call counts. A missing file sums to zero.

    Keys: calls (model calls answered or refused), failed_calls (status >= 400 or no
    status), refused_calls (per-rollout caps), calls_without_usage (answered 2xx without
    a usage object), other_requests (e.g. /models), latency_s, and the USAGE_KEYS sums.
    """
    out: dict[str, Any] = {
        "calls": 0, "failed_calls": 0, "refused_calls": 0, "calls_without_usage": 0,
        "other_requests": 0, "latency_s": 0.0, **{k: 0 for k in USAGE_KEYS},
    }
    for row in iter_calls(path):
        if not is_model_call(row):
            out["other_requests"] += 1
            continue
        out["calls"] += 1
        status = row.get("status")
        if not isinstance(status, int) or status >= 400:
            out["failed_calls"] += 1
        if row.get("refused"):
            out["refused_calls"] += 1
        out["latency_s"] += float(row.get("latency_s") or 0.0)
        usage = row.get("usage")
        if isinstance(usage, dict):
            for key in USAGE_KEYS:
                out[key] += _int(usage.get(key))
        elif isinstance(status, int) and status < 400:
            out["calls_without_usage"] += 1
    out["latency_s"] = round(out["latency_s"], 6)
    return out


def summarize(path: str | Path) -> dict[str, Any]:
    """Responses-style usage of every model call recorded in `path` (zeros when there were none)."""
    totals = summarize_usage(path)
    out = responses.usage(totals["prompt_tokens"], totals["completion_tokens"],
                          totals["cached_tokens"], totals["reasoning_tokens"])
    out["model_calls"] = totals["calls"]
    return out
