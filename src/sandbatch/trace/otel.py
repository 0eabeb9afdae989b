"""Tracing with the OpenTelemetry SDK: ids, spans, exporters (imported only when traces are on).

One trace per rollout. Its id is derived from the run instance id, the task and the repeat,
and each step's span is the child of a `rollout` span whose id is derived the same way, so
the spans that separate step processes write (local, or Slurm jobs on other hosts) join one
tree without talking to each other. The grade step, the rollout's last, writes that root
span itself, from the sandbox step's start to its own end.

Exporters (config `traces.exporters`):
- `file`: OTLP-JSON lines appended to the rollout's trace.jsonl, each span as it ends, one
  write(2) per line on an O_APPEND descriptor: a killed step leaves whole lines only. A
  step's span is also written when it starts, marked `sandbatch.unfinished`; readers keep
  the last line of a span id, so a step killed mid-run shows as unfinished.
- `otlp_http` / `otlp_grpc`: the SDK's OTLP exporters behind a batch processor (a thread),
  configured by the standard OTEL_EXPORTER_OTLP_* variables unless `traces.endpoint` is
  set. A collector that is down, slow or refusing costs at most `export_timeout` once: the
  first failed export prints one warning and every later span of that step is dropped at
  once; the count goes to trace_dropped.jsonl (metrics.json sums it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shlex
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (BatchSpanProcessor, SimpleSpanProcessor, SpanExporter,
                                            SpanExportResult)
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import SpanKind, Status, StatusCode

from .. import trace as api
from ..core.errors import InfraError, UserError
from ..contracts.files import GRADE, SANDBOX
from ..core.instance import run_labels
from ..core.util import read_json

SCOPE = "sandbatch"
TITLE_CHARS = 120


# --- ids -----------------------------------------------------------------------------------

def _digest(*parts: Any) -> bytes:
    return hashlib.sha256("\0".join(str(p) for p in parts).encode()).digest()


def trace_id_for(instance: str, task_id: str, repeat: int) -> int:
    return int.from_bytes(_digest("sandbatch-trace", instance, task_id, repeat)[:16], "big") or 1


def root_span_id_for(instance: str, task_id: str, repeat: int) -> int:
    return int.from_bytes(_digest("sandbatch-rollout", instance, task_id, repeat)[:8], "big") or 1


class _Ids(RandomIdGenerator):
    """Random ids, except for the rollout's root span: its trace and span ids are derived."""

    def __init__(self):
        self._lock = threading.Lock()
        self.fixed: tuple[int, int] | None = None

    def generate_trace_id(self) -> int:
        fixed = self.fixed
        return fixed[0] if fixed else super().generate_trace_id()

    def generate_span_id(self) -> int:
        with self._lock:
            fixed, self.fixed = self.fixed, None
        return fixed[1] if fixed else super().generate_span_id()


# --- OTLP JSON (the OTLP/JSON encoding: hex ids, int64 as strings, enums as numbers) ---------

def _value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, (list, tuple)):
        return {"arrayValue": {"values": [_value(x) for x in v]}}
    return {"stringValue": str(v)}


def _attributes(attrs: Any) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in (attrs or {}).items()]


def encode_span(span: ReadableSpan, unfinished: bool = False) -> dict[str, Any]:
    ctx = span.get_span_context()
    attrs = dict(span.attributes or {})
    if unfinished:
        attrs["sandbatch.unfinished"] = True
    out: dict[str, Any] = {
        "traceId": format(ctx.trace_id, "032x"), "spanId": format(ctx.span_id, "016x"),
        "name": span.name, "kind": span.kind.value + 1,
        "startTimeUnixNano": str(span.start_time),
        "endTimeUnixNano": str(span.start_time if unfinished else span.end_time),
        "attributes": _attributes(attrs),
    }
    if span.parent is not None:
        out["parentSpanId"] = format(span.parent.span_id, "016x")
    if span.events:
        out["events"] = [{"timeUnixNano": str(e.timestamp), "name": e.name, "attributes": _attributes(e.attributes)}
                         for e in span.events]
    code = StatusCode.ERROR if unfinished else span.status.status_code
    status: dict[str, Any] = {"code": code.value}
    message = "unfinished" if unfinished else span.status.description
    if message:
        status["message"] = message
    out["status"] = status
    return out


def encode(spans: Sequence[ReadableSpan], unfinished: bool = False) -> dict[str, Any]:
    """An ExportTraceServiceRequest in OTLP JSON."""
    groups: dict[int, tuple[ReadableSpan, list]] = {}
    for s in spans:
        groups.setdefault(id(s.resource), (s, []))[1].append(encode_span(s, unfinished))
    return {"resourceSpans": [
        {"resource": {"attributes": _attributes(first.resource.attributes)},
         "scopeSpans": [{"scope": {"name": SCOPE}, "spans": encoded}]}
        for first, encoded in groups.values()]}


class FileExporter(SpanExporter):
    """OTLP-JSON lines appended to one file, each export one write(2) of whole lines."""

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None
        self._lock = threading.Lock()

    def write(self, spans: Sequence[ReadableSpan], unfinished: bool = False) -> None:
        line = (json.dumps(encode(spans, unfinished), separators=(",", ":"), ensure_ascii=False) + "\n").encode()
        with self._lock:
            if self._fd is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view):]

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            self.write(spans)
        except OSError as exc:
            print(f"sandbatch: traces: cannot write {self.path}: {exc}", file=sys.stderr)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class GuardedExporter(SpanExporter):
    """A collector's exporter that gives up at its first failure: one warning, then every
    later batch is dropped at once, so a dead or slow collector costs a step one timeout."""

    def __init__(self, inner: SpanExporter, label: str):
        self.inner, self.label = inner, label
        self.exported = 0
        self.error: str | None = None
        self.closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.error is not None or self.closed:
            return SpanExportResult.FAILURE
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # an exporter bug must not end the export thread
            result, self.error = SpanExportResult.FAILURE, repr(exc)
        if result is SpanExportResult.SUCCESS:
            self.exported += len(spans)
            return result
        self.error = self.error or "the collector did not accept the spans"
        print(f"sandbatch: traces: {self.label} failed ({self.error}); this step's further spans are dropped "
              f"(counted in metrics.json)", file=sys.stderr, flush=True)
        return result

    def shutdown(self) -> None:
        self.closed = True


class _Count(SpanProcessor):
    def __init__(self):
        self.ended = 0

    def on_end(self, span: ReadableSpan) -> None:
        self.ended += 1


def _timeout_from_env() -> bool:
    return any(os.environ.get(v) for v in ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"))


def network_exporter(kind: str, endpoint: str | None, timeout: float) -> SpanExporter:
    kwargs: dict[str, Any] = {} if _timeout_from_env() else {"timeout": timeout}
    if endpoint:
        kwargs["endpoint"] = endpoint
    if kind == "otlp_http":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter(**kwargs)


def _endpoint_label(kind: str, endpoint: str | None) -> str:
    where = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT") or "the default endpoint"
    return f"{kind} export to {where}"


# --- the process's tracing -------------------------------------------------------------------

class Tracing:
    """One step attempt's tracer provider and exporters, and the rollout's ids."""

    def __init__(self, ctx, step: str):
        cfg = ctx.cfg
        self.ctx, self.step = ctx, step
        instance = run_labels(cfg)["instance"]
        self.trace_id = trace_id_for(instance, ctx.task_id, ctx.repeat)
        self.root_id = root_span_id_for(instance, ctx.task_id, ctx.repeat)
        self.ids = _Ids()
        resource = Resource.create({
            "service.name": os.environ.get("OTEL_SERVICE_NAME") or "sandbatch",
            "openinference.project.name": cfg.run,  # Phoenix files each run's traces as a project
            "sandbatch.run": cfg.run, "sandbatch.instance": instance})
        self.provider = TracerProvider(resource=resource, id_generator=self.ids, shutdown_on_exit=False)
        self.count = _Count()
        self.provider.add_span_processor(self.count)
        self.file: FileExporter | None = None
        self.guarded: list[GuardedExporter] = []
        timeout = cfg.traces.export_timeout
        for kind in cfg.traces.exporters:
            if kind == "file":
                self.file = FileExporter(ctx.path(api.TRACE_FILE))
                self.provider.add_span_processor(SimpleSpanProcessor(self.file))
                continue
            guarded = GuardedExporter(network_exporter(kind, cfg.traces.endpoint, timeout),
                                      _endpoint_label(kind, cfg.traces.endpoint))
            self.guarded.append(guarded)
            self.provider.add_span_processor(BatchSpanProcessor(
                guarded, schedule_delay_millis=500, export_timeout_millis=int(timeout * 1000)))
        self.tracer = self.provider.get_tracer(SCOPE)
        root = otel_trace.SpanContext(self.trace_id, self.root_id, is_remote=True,
                                      trace_flags=otel_trace.TraceFlags(otel_trace.TraceFlags.SAMPLED))
        self.parent = otel_trace.set_span_in_context(otel_trace.NonRecordingSpan(root))

    # --- spans ---

    @contextlib.contextmanager
    def span(self, name: str, attributes: dict[str, Any], *, kind: SpanKind = SpanKind.INTERNAL,
             context: Any = None, open_mark: bool = False):
        span = self.tracer.start_span(name, context=context, kind=kind, attributes=_clean(attributes))
        if open_mark and self.file is not None:
            with contextlib.suppress(OSError):
                self.file.write([span], unfinished=True)
        token = otel_context.attach(otel_trace.set_span_in_context(span))
        try:
            yield span
        except BaseException as exc:
            failed(span, exc)
            raise
        finally:
            otel_context.detach(token)
            span.end()

    def event(self, name: str, attributes: dict[str, Any]) -> None:
        otel_trace.get_current_span().add_event(name, _clean(attributes))

    def capture(self) -> Any:
        return otel_context.get_current()

    async def sandbox_op(self, fn, op: str, kind: str, obj, args: tuple, kwargs: dict):
        provider = obj.provider.name if kind == "sandbox" else obj.name
        attrs = {"sandbox.provider": provider, **_op_attributes(op, kind, obj, args, kwargs)}
        with self.span(f"sandbox.{provider}.{op}", attrs) as span:
            result = await fn(obj, *args, **kwargs)
            _op_result(span, op, result)
            return result

    def model_call(self, record: dict[str, Any], parent: Any) -> None:
        end = time.time_ns()
        start = end - int(float(record.get("latency_s") or 0) * 1e9)
        model = record.get("model") or "unknown"
        operation = {"chat": "chat", "responses": "chat", "completions": "text_completion"}.get(
            record.get("endpoint"), "chat")
        usage = record.get("usage") or {}
        status = record.get("status")
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": operation, "gen_ai.system": "openai", "gen_ai.request.model": model,
            "gen_ai.request.stream": bool(record.get("stream")), "http.response.status_code": status,
            "openinference.span.kind": "LLM", "llm.model_name": model, "llm.system": "openai",
            "sandbatch.call": record.get("call"), "sandbatch.endpoint": record.get("endpoint"),
            "sandbatch.attempts": record.get("attempts"), "sandbatch.refused": record.get("refused"),
        }
        if usage:
            prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
            attrs.update({"gen_ai.usage.input_tokens": prompt, "gen_ai.usage.output_tokens": completion,
                          "llm.token_count.prompt": prompt, "llm.token_count.completion": completion,
                          "llm.token_count.total": usage.get("total_tokens", prompt + completion)})
        if record.get("first_byte_s") is not None:
            attrs["sandbatch.time_to_first_token_s"] = record["first_byte_s"]
        span = self.tracer.start_span(f"{operation} {model}", context=parent, kind=SpanKind.CLIENT,
                                      attributes=_clean(attrs), start_time=start)
        if record.get("first_byte_s") is not None:
            span.add_event("gen_ai.first_token", timestamp=start + int(record["first_byte_s"] * 1e9))
        for i, code in enumerate(record.get("attempt_statuses") or []):
            if i:
                span.add_event("retry", {"attempt": i + 1, "previous_status": str(code)})
        error = record.get("error")
        if error or (isinstance(status, int) and status >= 400) or status is None:
            span.set_attribute("error.type", str(status or "no_response"))
            span.set_status(Status(StatusCode.ERROR, str(error or f"HTTP {status}")[:500]))
        span.end(end_time=end)

    def root(self, started_at: str | None, attributes: dict[str, Any], error: str | None) -> None:
        """The rollout's root span (ids derived, so the steps' spans are its children)."""
        start = _ns(started_at)
        self.ids.fixed = (self.trace_id, self.root_id)
        span = self.tracer.start_span("rollout", context=otel_context.Context(), attributes=_clean(attributes),
                                      start_time=start)
        self.ids.fixed = None
        if error:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    # --- the end of a step attempt ---

    def finish(self) -> None:
        """Flush what is left (a bounded wait), close the file, record what was dropped."""
        timeout_ms = int(self.ctx.cfg.traces.export_timeout * 1000)
        if self.guarded:
            self.provider.force_flush(timeout_ms)
        for guarded in self.guarded:
            guarded.closed = True  # whatever still waits in the queue is dropped, not sent late
        if self.file is not None:
            self.file.shutdown()
        dropped = [(g, self.count.ended - g.exported) for g in self.guarded if self.count.ended > g.exported]
        for guarded, n in dropped:
            line = {"step": self.step, "attempt": self.ctx.attempt, "exporter": guarded.label, "dropped": n,
                    "error": guarded.error or "not sent within traces.export_timeout"}
            with contextlib.suppress(OSError), open(self.ctx.path(api.DROPPED_FILE), "a", encoding="utf-8") as fh:
                fh.write(json.dumps(line) + "\n")


def failed(span, exc: BaseException) -> None:
    """An exception as the span's status: infrastructure failures carry their class."""
    import asyncio

    if isinstance(exc, asyncio.CancelledError):
        span.add_event("cancelled")
        span.set_status(Status(StatusCode.ERROR, "cancelled (stopped by a signal or a timeout)"))
        return
    if isinstance(exc, InfraError):
        span.set_attribute("sandbatch.failure_class", exc.failure_class)
        span.add_event("infra_error", {"failure_class": exc.failure_class, "message": str(exc)[:1000]})
    elif not isinstance(exc, UserError):
        span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:500]))


def command_title(command: str | Sequence[str]) -> str:
    """A command's first line, cut short: what a waterfall shows for an exec."""
    text = command if isinstance(command, str) else shlex.join(str(c) for c in command)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = " ".join(lines[0].split()) if lines else ""
    if len(first) > TITLE_CHARS:
        first = first[:TITLE_CHARS - 1] + "…"
    return first + (f" (+{len(lines) - 1} lines)" if len(lines) > 1 else "")


def _op_attributes(op: str, kind: str, obj, args: tuple, kwargs: dict) -> dict[str, Any]:
    def arg(i: int, name: str):
        return args[i] if len(args) > i else kwargs.get(name)

    if kind == "sandbox":
        attrs: dict[str, Any] = {"sandbox.id": getattr(obj, "id", None)}
        if op == "exec":
            attrs["sandbox.command"] = command_title(arg(0, "command"))
            attrs["sandbox.timeout_s"] = kwargs.get("timeout")
        elif op in ("upload", "download"):
            attrs["sandbox.path"] = arg(0, "path")
            if op == "upload":
                data = arg(1, "data")
                attrs["sandbox.bytes"] = len(data) if data is not None else None
        elif op == "upload_files":
            files = arg(0, "files") or {}
            attrs["sandbox.path"] = command_title(", ".join(files))
            attrs["sandbox.files"] = len(files)
            attrs["sandbox.bytes"] = sum(len(data) for data, _ in files.values())
        return attrs
    if op == "create":
        spec = arg(0, "spec")
        return {"sandbox.image": getattr(spec, "image", None)}
    return {"sandbox.id": arg(0, "sandbox_id")}


def _op_result(span, op: str, result: Any) -> None:
    if op == "exec" and result is not None:
        span.set_attribute("sandbox.exit_code", result.exit_code)
        span.set_attribute("sandbox.duration_s", result.duration_s)
        if result.timed_out:
            span.set_attribute("sandbox.timed_out", True)
            span.set_status(Status(StatusCode.ERROR, "timed out"))
    elif op == "download" and isinstance(result, (bytes, bytearray)):
        span.set_attribute("sandbox.bytes", len(result))
    elif op in ("create", "connect") and result is not None:
        span.set_attribute("sandbox.id", result.id)
    elif op == "delete" and isinstance(result, bool):
        span.set_attribute("sandbox.existed", result)


def _clean(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if v is not None}


def _ns(iso: str | None) -> int | None:
    if not iso:
        return None
    try:
        return int(datetime.fromisoformat(iso).timestamp() * 1e9)
    except ValueError:
        return None


def _read_json(path: Path) -> dict[str, Any]:
    """A step record's fields, or none when it is not there (yet)."""
    with contextlib.suppress(OSError, ValueError):
        return dict(read_json(path))
    return {}


# the SDK's exporters log every failed export; GuardedExporter says it once instead
logging.getLogger("opentelemetry.exporter").setLevel(logging.CRITICAL)
logging.getLogger("opentelemetry.sdk.trace.export").setLevel(logging.CRITICAL)


@contextlib.contextmanager
def step_span(ctx, name: str):
    """Tracing for one step attempt, and its span under the rollout's root."""
    tracing = Tracing(ctx, name)
    api._active = tracing
    attrs = {"sandbatch.step": name, "sandbatch.task_id": ctx.task_id, "sandbatch.repeat": ctx.repeat,
             "sandbatch.attempt": ctx.attempt, "sandbatch.max_attempts": ctx.max_attempts}
    error: BaseException | None = None
    try:
        with tracing.span(name, attrs, context=tracing.parent, open_mark=True):
            yield
    except BaseException as exc:
        error = exc
        raise
    finally:
        try:
            final = error is None or (isinstance(error, InfraError) and ctx.last_attempt)
            if name == "grade" and final:
                grade = _read_json(ctx.path(GRADE))
                tracing.root(_read_json(ctx.path(SANDBOX)).get("started_at"), {
                    "sandbatch.task_id": ctx.task_id, "sandbatch.instance_id": ctx.task.instance_id,
                    "sandbatch.repeat": ctx.repeat, "sandbatch.reward": grade.get("reward"),
                    "sandbatch.resolved": grade.get("resolved"),
                    "sandbatch.status": "infra_error" if error is not None else grade.get("status"),
                    "openinference.span.kind": "CHAIN"}, str(error) if error is not None else None)
        finally:
            api._active = None
            tracing.finish()
