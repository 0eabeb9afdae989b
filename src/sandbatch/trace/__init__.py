"""OpenTelemetry traces, every rollout one trace (config `traces`): the free-while-off API here,
the SDK side in otel.py. May import core and contracts.

This module is what the rest of the code calls; it imports nothing heavy. While no step of
this process has tracing on (`traces.exporters` empty), every call here is a check of one
global and the OpenTelemetry SDK is never imported. sandbatch.trace.otel does the work.

- `step(ctx, name)`: around one attempt of a workflow step (steps/common.py).
- `span(name, **attributes)`: a child span of whatever is current (harness and grader phases).
- `event(name, **attributes)`: an event on the current span (retries, admission waits).
- `instrument(cls, kind)`: wraps a provider's or sandbox's operations in spans; called by
  the base classes for every subclass (sandbox/base.py), so every provider is traced alike.
- `capture()` / `model_call(record, parent)`: the model proxy's calls, made in its own
  thread, as LLM spans under the harness step.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from ..contracts.model_calls import iter_calls

if TYPE_CHECKING:
    from .otel import Tracing

TRACE_FILE = "trace.jsonl"  # per rollout: OTLP-JSON lines (ExportTraceServiceRequest each)
DROPPED_FILE = "trace_dropped.jsonl"  # per rollout: spans a collector did not take, per step attempt

_active: "Tracing | None" = None  # set while a step of this process is traced
_NULL = contextlib.nullcontext()

SANDBOX_OPS = ("exec", "upload", "upload_files", "download", "probe")
PROVIDER_OPS = ("create", "connect", "delete")


def enabled() -> bool:
    return _active is not None


@contextlib.contextmanager
def step(ctx, name: str):
    """The span of one attempt of step `name` of the rollout `ctx` (a StepContext), with
    tracing set up for this process from the run's config; nothing when it is off."""
    if not ctx.cfg.traces.exporters:
        yield
        return
    from . import otel

    with otel.step_span(ctx, name):
        yield


def span(name: str, **attributes: Any):
    """A context manager: a span under the current one (nothing when tracing is off)."""
    if _active is None:
        return _NULL
    return _active.span(name, attributes)


def event(name: str, **attributes: Any) -> None:
    if _active is not None:
        _active.event(name, attributes)


def capture() -> Any:
    """The current trace context, to parent spans made in another thread (None when off)."""
    return None if _active is None else _active.capture()


def model_call(record: dict[str, Any], parent: Any) -> None:
    """An LLM span for one model call the proxy recorded (model_calls.jsonl row)."""
    if _active is not None and parent is not None:
        _active.model_call(record, parent)


def instrument(cls: type, ops: Iterable[str], kind: str) -> None:
    """Wrap the operations `cls` itself defines (kind "sandbox" or "provider") in spans."""
    for op in ops:
        fn = cls.__dict__.get(op)
        if fn is None or getattr(fn, "_sandbatch_traced", False):
            continue
        setattr(cls, op, _traced(fn, op, kind))


def _traced(fn, op: str, kind: str):
    @functools.wraps(fn)
    async def traced(self, *args, **kwargs):
        if _active is None:
            return await fn(self, *args, **kwargs)
        return await _active.sandbox_op(fn, op, kind, self, args, kwargs)

    traced._sandbatch_traced = True
    return traced


# --- reading a rollout's trace files (the viewer, the report, the aggregate) ----------------

def read_spans(path) -> list[dict[str, Any]]:
    """The spans of an OTLP-JSON lines file, the last line of each span id winning (a span
    written unfinished when it started, then finished); a line a killed writer left short is
    skipped. Each span as OTLP JSON has it, its attributes flattened into a dict."""
    import json

    spans: dict[str, dict[str, Any]] = {}
    try:
        fh = open(path, encoding="utf-8")
    except OSError:
        return []
    with fh:
        for line in fh:
            try:
                request = json.loads(line)
            except ValueError:
                continue
            for rs in request.get("resourceSpans", []) if isinstance(request, dict) else []:
                for ss in rs.get("scopeSpans", []):
                    for s in ss.get("spans", []):
                        spans[s["spanId"]] = {**s, "attributes": _flat(s.get("attributes"))}
    return sorted(spans.values(), key=lambda s: int(s["startTimeUnixNano"]))


def _flat(attrs: Any) -> dict[str, Any]:
    out = {}
    for a in attrs or []:
        value = a.get("value") or {}
        for kind, v in value.items():
            out[a["key"]] = int(v) if kind == "intValue" else v
    return out


def dropped_spans(rollout_dir) -> int:
    """Spans of this rollout a collector did not take (DROPPED_FILE), over all step attempts."""
    return sum(int(row.get("dropped") or 0) for row in iter_calls(Path(rollout_dir) / DROPPED_FILE))


# --- where a rollout's time went ---------------------------------------------------------

KINDS = ("model", "tests", "sandbox", "orchestration")  # most specific first


def kind_of(span: Mapping[str, Any]) -> str:
    name, attrs = span["name"], span.get("attributes") or {}
    if attrs.get("openinference.span.kind") == "LLM":
        return "model"
    if name == "grade.tests":
        return "tests"
    if name.startswith("sandbox."):
        return "sandbox"
    return "orchestration"


def time_by_kind(spans: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Seconds of a rollout by kind of work, from its first span's start to its last's end.
    Each instant counts once, for the most specific kind at work then (model over tests over
    sandbox operations: an agent's command runs in the sandbox while its model calls go out);
    any other instant, a gap between two steps included, is orchestration."""
    events: list[tuple[int, int, str]] = []
    for s in spans:
        if (s.get("attributes") or {}).get("sandbatch.unfinished"):
            continue
        kind = kind_of(s)
        if kind != "orchestration":
            events += [(int(s["startTimeUnixNano"]), 1, kind), (int(s["endTimeUnixNano"]), -1, kind)]
        else:
            events += [(int(s["startTimeUnixNano"]), 0, kind), (int(s["endTimeUnixNano"]), 0, kind)]
    if not events:
        return {}
    events.sort()
    out = dict.fromkeys(KINDS, 0.0)
    active = dict.fromkeys(KINDS, 0)
    last = events[0][0]
    for at, delta, kind in events:
        busy = next((k for k in KINDS if active[k] > 0), "orchestration")
        out[busy] += (at - last) / 1e9
        active[kind] += delta
        last = at
    return {k: round(v, 3) for k, v in out.items()}
