"""Token usage summed over a rollout's model calls (model_calls.jsonl, one JSON line per call)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import responses
from .util import iter_jsonl

KEYS = ("prompt_tokens", "completion_tokens", "reasoning_tokens", "cached_tokens")


def summarize(path: str | Path) -> dict[str, Any]:
    """Responses-style usage of every call recorded in `path` (zeros when there were none)."""
    totals = dict.fromkeys(KEYS, 0)
    calls = 0
    if Path(path).exists():
        for call in iter_jsonl(path):
            calls += 1
            for key in KEYS:
                totals[key] += int((call.get("usage") or {}).get(key) or 0)
    out = responses.usage(totals["prompt_tokens"], totals["completion_tokens"],
                          totals["cached_tokens"], totals["reasoning_tokens"])
    out["model_calls"] = calls
    return out
