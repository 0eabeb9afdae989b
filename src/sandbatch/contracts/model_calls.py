"""What a line of model_calls.jsonl holds, for its writer (the model proxy) and its readers
(rollout usage, the viewer, traces): the endpoints that count as model calls, usage in one
shape for Chat and Responses, and reading the file back.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Iterator, Mapping

from ..core.failures import FailureClass

# endpoints that generate tokens; the others (models, ...) are recorded but not counted as calls
MODEL_ENDPOINTS = frozenset({"chat", "responses", "completions", "messages"})


def int_or_zero(value: Any) -> int:
    """An integer field of a usage object; anything else (a bool, null, a string) counts 0."""
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
        prompt = int_or_zero(usage.get("input_tokens"))
        completion = int_or_zero(usage.get("output_tokens"))
        in_details = usage.get("input_tokens_details") or {}
        out_details = usage.get("output_tokens_details") or {}
    else:
        prompt = int_or_zero(usage.get("prompt_tokens"))
        completion = int_or_zero(usage.get("completion_tokens"))
        in_details = usage.get("prompt_tokens_details") or {}
        out_details = usage.get("completion_tokens_details") or {}
    cached = int_or_zero(in_details.get("cached_tokens")) if isinstance(in_details, Mapping) else 0
    reasoning = int_or_zero(out_details.get("reasoning_tokens")) if isinstance(out_details, Mapping) else 0
    if not reasoning:
        reasoning = int_or_zero(usage.get("reasoning_tokens"))  # some servers put it at the top level
    total = int_or_zero(usage.get("total_tokens")) or prompt + completion
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


# --- the model endpoint's failures --------------------------------------------------------
# A rollout whose agent met one of these is an infrastructure failure of that class, never a
# reward (docs/proxy.md, "When the model endpoint fails"). The proxy writes the class of each
# failed call as `endpoint_failure`; the harness step decides from them.
ENDPOINT_FAILURES: dict[FailureClass, str] = {
    c: c.meaning for c in (FailureClass.MODEL_UNREACHABLE, FailureClass.MODEL_UNAVAILABLE, FailureClass.MODEL_AUTH,
                           FailureClass.MODEL_NOT_FOUND)
}


def status_failure(status: int) -> FailureClass | None:
    """The endpoint failure an upstream HTTP status stands for; None for a success or a
    request the agent got wrong (400, 413, 422, ...: the agent's own failure)."""
    if status in (401, 403):
        return FailureClass.MODEL_AUTH
    if status == 404:
        return FailureClass.MODEL_NOT_FOUND
    if status == 429 or status >= 500:
        return FailureClass.MODEL_UNAVAILABLE
    return None


def outage(rows: Iterable[Mapping[str, Any]]) -> tuple[str, Mapping[str, Any], int, int] | None:
    """(failure class, the call, failed calls, calls) when the rollout's last finished model
    call failed for the endpoint's reasons: the agent ended in an outage, whatever it did
    before. None when the last call was answered (an agent that met a passing failure and
    went on is judged by what it did) or refused by the proxy's own caps."""
    last, failed, calls = None, 0, 0
    for row in rows:
        if row.get("endpoint") not in MODEL_ENDPOINTS or row.get("refused") or row.get("status") is None:
            continue  # not a model call, a cap's refusal, or one cut off when the proxy stopped
        calls += 1
        failed += bool(row.get("endpoint_failure"))
        last = row
    if last is None or not last.get("endpoint_failure"):
        return None
    return last["endpoint_failure"], last, failed, calls
