"""Host CPU that traces add per rollout (target <= 2 % with traces on; none with them off).

The real workflow on the local provider, host-mode mini-swe-agent against the scripted model
(benchmarks/scripted.py: `--turns` model calls per rollout, each a span, and its commands,
each a sandbox span), the smoke tasks (default 3 tasks x 2 repeats), run in fresh
directories with `traces` off, with the file exporter, and with the file and OTLP/HTTP
exporters (to a collector on a thread of this process that accepts every request and is not
counted). The configurations take turns for `--rounds` rounds (the machine is shared: the
median of each is printed, and the ratios of the medians). Measured: the CPU of the whole
Snakemake process tree; run-to-run noise on a shared machine is several %, so the cost
per span is also measured in-process (CPU of making, ending and exporting one span) and
multiplied by the spans a rollout makes. Off: the cost of a traced sandbox operation while traces are off,
against the same method unwrapped, in-process (ns per call), times the operations a rollout
makes.

    python benchmarks/trace_cpu.py [--tasks 3] [--repeats 2] [--turns 8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mini_cpu import run as mini_run  # noqa: E402
from scripted import mini_harness, serve  # noqa: E402



class _Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP collector that takes every export (an empty ExportTraceServiceResponse)."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def run(a, label: str, url: str, traces: dict) -> tuple[float, int]:
    """(CPU-s per rollout, spans per rollout) of one run in a fresh directory."""
    from sandbatch.trace import TRACE_FILE, read_spans

    spans = []

    def count(run_dir: Path, rows: list[dict]) -> None:
        spans.append(sum(len(read_spans(run_dir / r["task_id"] / str(r["repeat"]) / TRACE_FILE)) for r in rows)
                     // len(rows))

    cpu = mini_run(a, label, *mini_harness(url), extra={"traces": traces}, inspect=count)
    print(f"    spans per rollout {spans[0]}", flush=True)
    return cpu, spans[0]


def off_cost_ns(n: int = 200_000) -> tuple[float, float]:
    """ns per call of a sandbox operation wrapped for traces while they are off, and unwrapped."""
    from sandbatch import trace

    class Plain:
        async def exec(self, command):
            return command

    class Wrapped(Plain):
        pass

    Wrapped.exec = Plain.exec
    trace.instrument(Wrapped, ["exec"], "sandbox")
    assert trace._active is None

    async def loop(obj) -> float:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            await obj.exec("true")
        return (time.perf_counter_ns() - t0) / n

    best = {}
    for _ in range(5):
        for name, obj in (("plain", Plain()), ("wrapped", Wrapped())):
            best[name] = min(best.get(name, float("inf")), asyncio.run(loop(obj)))
    return best["wrapped"], best["plain"]


def in_process_us(exporters: list[str], endpoint: str | None, n: int = 5000, steps: int = 50) -> tuple[float, float]:
    """(CPU-µs per span, CPU-µs per step) in-process: a sandbox-operation-sized span (five
    attributes) made, ended and exported (`exporters`) inside a step span of a real config;
    a step's set-up and end (tracer provider, exporters, its span, the flush) with no span in it."""
    from sandbatch import trace
    from sandbatch.core.config import parse
    from sandbatch.steps.common import StepContext

    wd = Path(tempfile.mkdtemp(prefix="sandbatch-trace-cpu-spans-"))
    cfg = parse({"results_dir": str(wd / "results"), "benchmark": {"limit": 1},
                 "traces": {"exporters": exporters, "endpoint": endpoint}})
    (wd / "run.json").write_text(cfg.model_dump_json())
    ctx = StepContext(wd / "run.json", "smoke__calc-1", 0, 1, 1)
    with trace.step(ctx, "warm-up"):
        pass
    t0 = time.process_time()
    for _ in range(steps):
        with trace.step(ctx, "bench"):
            pass
    per_step = (time.process_time() - t0) / steps
    with trace.step(ctx, "bench"):
        t0 = time.process_time()
        for i in range(n):
            with trace.span("sandbox.local.exec", **{"sandbox.provider": "local", "sandbox.id": "sb-1",
                                                     "sandbox.command": "git status", "sandbox.timeout_s": 60.0,
                                                     "sandbox.exit_code": i % 2}):
                pass
        per_span = (time.process_time() - t0) / n  # the batch exporter's thread is in it too
    shutil.rmtree(wd, ignore_errors=True)
    return 1e6 * per_span, 1e6 * per_step


def import_cpu_s(exporters: list[str]) -> float:
    """CPU-s of importing the SDK and the exporters, once per run (in the step server)."""
    mods = ["sandbatch.trace.otel", *(f"opentelemetry.exporter.otlp.proto.{e[5:]}.trace_exporter"
                                      for e in exporters if e != "file")]
    code = ("import resource, sys; import sandbatch.steps.common, sandbatch.sandbox.local; "
            "ru = resource.getrusage(resource.RUSAGE_SELF); t = ru.ru_utime + ru.ru_stime; "
            f"[__import__(m) for m in {mods!r}]; ru = resource.getrusage(resource.RUSAGE_SELF); "
            "print(ru.ru_utime + ru.ru_stime - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=3, help="smoke tasks (1-5)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--turns", type=int, default=8, help="model turns per rollout (>= 2)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=2)
    a = p.parse_args()
    collector = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{collector.server_address[1]}/v1/traces"
    configs = {"off": {}, "file": {"exporters": ["file"]},
               "file+otlp_http": {"exporters": ["file", "otlp_http"], "endpoint": endpoint}}
    cpu: dict[str, list[float]] = {k: [] for k in configs}
    spans = 0
    with serve(a.turns) as url:
        for i in range(a.rounds):
            print(f"round {i + 1} of {a.rounds}", flush=True)
            for label, traces in configs.items():
                per, n = run(a, label.replace("+", "-"), url, traces)
                cpu[label].append(per)
                spans = max(spans, n)
    off = statistics.median(cpu["off"])
    for label in ("file", "file+otlp_http"):
        on = statistics.median(cpu[label])
        print(f"traces {label}: CPU per rollout {on:.3f} s vs {off:.3f} s off: {100 * (on - off) / off:+.1f} % "
              f"(target <= 2 %); {spans} spans per rollout, {1e3 * (on - off) / max(spans, 1):.2f} ms per span")
    for exporters in (["file"], ["file", "otlp_http"]):
        span_us, step_us = in_process_us(exporters, endpoint if "otlp_http" in exporters else None)
        per_rollout = (span_us * spans + step_us * 5) / 1e6
        imports = import_cpu_s(exporters)
        print(f"in-process, {'+'.join(exporters)}: {span_us:.0f} CPU-us per span, {step_us / 1e3:.1f} CPU-ms per "
              f"step; per rollout ({spans} spans, 5 steps) {1e3 * per_rollout:.1f} ms = "
              f"{100 * per_rollout / off:.2f} % of its CPU off (target <= 2 %); once per run, the imports: "
              f"{imports:.2f} CPU-s ({100 * imports / off / 500:.2f} % of a 500-rollout run)")
    wrapped, plain = off_cost_ns()
    ops = spans  # an upper bound of the traced operations a rollout makes
    print(f"traces off: a sandbox operation costs {wrapped - plain:.0f} ns more than unwrapped "
          f"({wrapped:.0f} vs {plain:.0f} ns); x {ops} operations = {(wrapped - plain) * ops / 1e6:.3f} ms per "
          f"rollout ({100 * (wrapped - plain) * ops / 1e9 / off:.4f} %); the OpenTelemetry SDK is not imported")
    collector.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
