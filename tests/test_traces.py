"""Traces (config `traces`): one OpenTelemetry trace per rollout, in a file and in a real backend.

The backend is Arize Phoenix (scripts/services/phoenix.sh); traces are read back through
Phoenix's own client. The file is checked with OpenTelemetry's own protobuf definitions.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from harness_support import CALC_EDIT, SLUG_EDIT, rollout, run_workflow, scripted_model_server, smoke_config
from services import missing
from suite import unique_run
from workflow_util import metrics

PHOENIX = os.environ.get("SANDBATCH_PHOENIX_URL", "http://127.0.0.1:6006")
PHOENIX_GRPC = f"http://127.0.0.1:{os.environ.get('SANDBATCH_PHOENIX_GRPC_PORT', '4317')}"  # scripts/services/phoenix.sh
TASKS = ["smoke__calc-1", "smoke__textutils-1"]
STEPS = {"sandbox", "harness", "convert", "patch", "grade"}


def phoenix():
    """Phoenix's client; a server that stopped answering is started again with the service script
    (it is idempotent: a server that answers is kept), and `missing` when that does not help."""
    try:
        urllib.request.urlopen(f"{PHOENIX}/healthz", timeout=3).read()
    except OSError as exc:
        script = Path(__file__).resolve().parents[1] / "scripts" / "services" / "phoenix.sh"
        started = os.geteuid() == 0 and subprocess.run(["bash", str(script)], capture_output=True,
                                                       timeout=600).returncode == 0
        if not started:
            missing(f"no Phoenix server at {PHOENIX} ({exc}); start it with scripts/services/phoenix.sh")
    from phoenix.client import Client

    return Client(base_url=PHOENIX)


def phoenix_traces(client, project: str, tasks: list[str], complete,
                   timeout: float = 120) -> dict[str, list[dict]]:
    """task -> the spans of its rollout's trace in Phoenix, once `complete(task, spans)` holds for
    every task (it raises AssertionError, or fails to find a span, while not). Export and Phoenix's ingest are asynchronous:
    the test polls for what it checks, at most `timeout` s, and on giving up raises what was
    still missing then."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            spans = client.spans.get_spans(project_identifier=project, limit=10000)
        except Exception:  # the project appears with its first span
            spans = []
        roots = {s["attributes"].get("sandbatch.task_id"): s["context"]["trace_id"]
                 for s in spans if s["name"] == "rollout"}
        try:
            assert set(tasks) <= set(roots), f"rollouts without their root span: {sorted(set(tasks) - set(roots))}"
            traces = {t: [s for s in spans if s["context"]["trace_id"] == roots[t]] for t in tasks}
            for task, trace in traces.items():
                complete(task, trace)
            return traces
        except (AssertionError, LookupError, StopIteration) as exc:  # a span the check reads not there yet
            if time.monotonic() > deadline:
                raise AssertionError(f"Phoenix project {project} after {timeout:.0f} s, {len(spans)} spans: "
                                     f"{exc}") from exc
        time.sleep(0.5)


def assert_phoenix_traces(run_dir: Path, run: str, tasks: list[str], provider: str) -> None:
    """Phoenix holds every rollout of the run as its span tree, each model call the rollout
    made (model_calls.jsonl) an LLM span under the harness step with its token counts."""
    def complete(task: str, spans: list[dict]) -> None:
        assert_rollout_tree(spans, provider, lambda s: s["context"]["span_id"], lambda s: s.get("parent_id"),
                            lambda s: s["name"])
        calls = [c for c in rollout(run_dir, task, "model_calls.jsonl") if c.get("call")]
        llm = [s for s in spans if s["span_kind"] == "LLM"]
        assert calls and len(llm) == len(calls), (task, len(llm), len(calls))
        harness_id = next(s["context"]["span_id"] for s in spans if s["name"] == "harness")
        assert all(s["parent_id"] == harness_id for s in llm)
        assert sorted(s["attributes"]["llm.token_count.prompt"] for s in llm) == sorted(
            c["usage"]["prompt_tokens"] for c in calls)
        assert sorted(s["attributes"]["gen_ai.usage.output_tokens"] for s in llm) == sorted(
            c["usage"]["completion_tokens"] for c in calls)
        assert all(s["attributes"]["llm.token_count.completion"] > 0 for s in llm)

    phoenix_traces(phoenix(), run, tasks, complete)


def file_spans(run_dir: Path, task: str) -> list[dict]:
    from sandbatch.trace import TRACE_FILE, read_spans

    return read_spans(run_dir / task / "0" / TRACE_FILE)


def tree(spans: list[dict], span_id, parent, name) -> dict[str, list[str]]:
    """parent span name -> child span names."""
    names = {span_id(s): name(s) for s in spans}
    out: dict[str, list[str]] = {}
    for s in spans:
        out.setdefault(names.get(parent(s), "<root>"), []).append(name(s))
    return out


def assert_rollout_tree(spans: list[dict], provider: str, span_id, parent, name) -> None:
    """One trace; its root the rollout, the five steps under it, each sandbox operation under a step."""
    t = tree(spans, span_id, parent, name)
    assert t["<root>"] == ["rollout"], t["<root>"]
    assert set(t["rollout"]) == STEPS, t["rollout"]
    assert f"sandbox.{provider}.create" in t["sandbox"] and f"sandbox.{provider}.exec" in t["sandbox"]
    assert {"harness.install", "harness.agent"} <= set(t["harness"])
    assert f"sandbox.{provider}.download" in t["patch"] and f"sandbox.{provider}.delete" in t["patch"]
    assert "grader" in t["grade"] and {"grade.apply", "grade.tests"} <= set(t["grader"])
    assert t["grade.tests"] == [f"sandbox.{provider}.exec"]


# --- a run of the smoke tasks with a model through the proxy, into a file and Phoenix ---------

SUBMIT = {"content": "Done.", "tool_calls": [{"name": "bash", "arguments": {
    "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}]}
SCRIPT = {"tasks": {
    "divide() truncates": [{"content": "Fixing.", "tool_calls": [{"name": "bash", "arguments": {"command": CALC_EDIT}}]}],
    "slugify() leaves": [{"content": "Fixing.", "tool_calls": [{"name": "bash", "arguments": {"command": SLUG_EDIT}}]}]},
    "final": SUBMIT}


@pytest.mark.slow
def test_smoke_run_traces_every_rollout_to_a_file_and_phoenix(tmp_path):
    phoenix()
    run = unique_run("traces")
    harness = {"name": "mini-swe-agent", "config": {"mode": "host", "step_limit": 4}}
    with scripted_model_server(SCRIPT) as (url, model):
        cfg = smoke_config(tmp_path, harness, TASKS, run=run, model={"base_url": url},
                           traces={"exporters": ["file", "otlp_http"], "endpoint": f"{PHOENIX}/v1/traces"})
        run_dir, _ = run_workflow(tmp_path, cfg)
    calls = {t: [c for c in rollout(run_dir, t, "model_calls.jsonl") if c.get("call")] for t in TASKS}
    assert all(calls.values()), calls
    for task in TASKS:
        assert rollout(run_dir, task, "grade.json")["reward"] == 1.0
        spans = file_spans(run_dir, task)
        assert len({s["traceId"] for s in spans}) == 1
        assert_rollout_tree(spans, "local", lambda s: s["spanId"], lambda s: s.get("parentSpanId"),
                            lambda s: s["name"])
        assert not any(s["attributes"].get("sandbatch.unfinished") for s in spans)
        llm = [s for s in spans if s["attributes"].get("openinference.span.kind") == "LLM"]
        assert [s["attributes"]["gen_ai.usage.input_tokens"] for s in llm] == [
            c["usage"]["prompt_tokens"] for c in calls[task]]
    assert metrics(tmp_path, run)["traces_dropped"] == 0
    assert_phoenix_traces(run_dir, run, TASKS, "local")

    def as_in_the_file(task: str, spans: list[dict]) -> None:  # the same spans as the file
        assert len(spans) == len(file_spans(run_dir, task)), (task, len(spans), len(file_spans(run_dir, task)))

    phoenix_traces(phoenix(), run, TASKS, as_in_the_file)


# --- the file, checked with OpenTelemetry's own protobuf schema --------------------------------

@pytest.fixture(scope="module")
def oracle_traced(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("oracle-traced")
    cfg = smoke_config(tmp, {"name": "oracle"}, TASKS, traces={"exporters": ["file"]})
    run_dir, _ = run_workflow(tmp, cfg)
    return tmp, run_dir


def test_trace_file_lines_are_otlp_export_requests(oracle_traced):
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    _, run_dir = oracle_traced
    lines = (run_dir / TASKS[0] / "0" / "trace.jsonl").read_text().splitlines()
    assert lines
    names = set()
    for line in lines:
        obj = json.loads(line)
        for rs in obj["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:  # OTLP/JSON writes ids as hex, protobuf's JSON as base64
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in s:
                            s[key] = base64.b64encode(bytes.fromhex(s[key])).decode()
        msg = json_format.ParseDict(obj, ExportTraceServiceRequest())  # unknown fields are errors
        for rs in msg.resource_spans:
            assert {a.key for a in rs.resource.attributes} >= {"service.name", "sandbatch.run"}
            names |= {s.name for ss in rs.scope_spans for s in ss.spans}
            assert all(len(s.trace_id) == 16 and s.end_time_unix_nano >= s.start_time_unix_nano
                       for ss in rs.scope_spans for s in ss.spans)
    assert {"rollout", *STEPS, "sandbox.local.exec"} <= names
    spans = file_spans(run_dir, TASKS[0])
    exec_span = next(s for s in spans if s["name"] == "sandbox.local.exec" and "eval.sh" in s["attributes"][
        "sandbox.command"])
    assert exec_span["attributes"]["sandbox.exit_code"] == 0 and exec_span["attributes"]["sandbox.timeout_s"] > 0
    # the patch, the verdict channel's start-up tracker (its sitecustomize), its plugin with their
    # three siblings and conf.json (no keys: the verdict goes through a pipe to a reader the test
    # user cannot touch), the build phase's start-up probe and the eval script: one upload
    batch = [s["attributes"] for s in spans if s["name"] == "sandbox.local.upload_files"]
    assert [(a["sandbox.files"], a["sandbox.path"].startswith("/")) for a in batch] == [(1 + 6 + 1 + 1, True)]
    assert batch[0]["sandbox.bytes"] > 1000
    root = next(s for s in spans if s["name"] == "rollout")
    assert root["attributes"]["sandbatch.reward"] == 1.0


def test_trace_ids_derive_from_the_run_instance_and_rollout():
    from sandbatch.trace.otel import root_span_id_for, trace_id_for

    assert trace_id_for("i1", "t", 0) == trace_id_for("i1", "t", 0)
    assert len({trace_id_for("i1", "t", 0), trace_id_for("i1", "t", 1), trace_id_for("i2", "t", 0),
                trace_id_for("i1", "u", 0)}) == 4
    assert 0 < root_span_id_for("i1", "t", 0) < 2 ** 64 and 0 < trace_id_for("i1", "t", 0) < 2 ** 128


# --- collectors that refuse or never answer cost a bounded wait, and the drops are counted ------

def _black_hole() -> tuple[socket.socket, int]:
    """A port that accepts connections and never answers (a hung collector)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    held: list[socket.socket] = []

    def accept():
        while True:
            try:
                held.append(sock.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return sock, sock.getsockname()[1]


@pytest.mark.parametrize("exporter", ["otlp_http", "otlp_grpc"])
def test_a_dead_or_hung_collector_never_fails_a_rollout(tmp_path, exporter):
    hole, port = _black_hole()
    endpoint = {"otlp_http": f"http://127.0.0.1:{port}/v1/traces", "otlp_grpc": f"http://127.0.0.1:{port}"}[exporter]
    try:
        cfg = smoke_config(tmp_path, {"name": "oracle"}, TASKS[:1],
                           traces={"exporters": ["file", exporter], "endpoint": endpoint, "export_timeout": 1})
        run_dir, _ = run_workflow(tmp_path, cfg)
    finally:
        hole.close()
    assert rollout(run_dir, TASKS[0], "grade.json")["reward"] == 1.0
    dropped = rollout(run_dir, TASKS[0], "trace_dropped.jsonl")
    assert {d["step"] for d in dropped} == STEPS and all(d["dropped"] > 0 for d in dropped)
    # the grade step reports done before its deletes and its last export: the aggregate may
    # count its drops or not yet
    assert 0 < metrics(tmp_path, "t")["traces_dropped"] <= sum(d["dropped"] for d in dropped)
    # the file exporter is unaffected by the collector
    assert {"rollout", *STEPS} <= {s["name"] for s in file_spans(run_dir, TASKS[0])}


def test_refusing_collector_drops_with_one_warning(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = smoke_config(tmp_path, {"name": "oracle"}, TASKS[:1],
                       traces={"exporters": ["otlp_http"], "endpoint": f"http://127.0.0.1:{port}/v1/traces",
                               "export_timeout": 1})
    run_dir, _ = run_workflow(tmp_path, cfg)
    assert rollout(run_dir, TASKS[0], "grade.json")["reward"] == 1.0
    assert metrics(tmp_path, "t")["traces_dropped"] > 0
    assert not (run_dir / TASKS[0] / "0" / "trace.jsonl").exists()
    for step in STEPS:
        text = (run_dir / TASKS[0] / "0" / "logs" / f"{step}.log").read_text()
        assert text.count("sandbatch: traces:") == 1, (step, text[-2000:])


# --- a killed step leaves whole lines, its span marked unfinished; off imports nothing -----------

KILLED = """
import os, signal, sys
from sandbatch import trace
from sandbatch.steps.common import parse_args
ctx = parse_args(["--config", sys.argv[1], "--task", "smoke__calc-1", "--repeat", "0"])
with trace.step(ctx, "harness"):
    with trace.span("harness.agent"):
        print("started", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
"""


def _settings(tmp_path: Path, traces: dict) -> Path:
    from sandbatch.core.config import parse

    cfg = parse(smoke_config(tmp_path, {"name": "oracle"}, TASKS[:1], traces=traces, results_dir=str(
        tmp_path / "results")))
    path = tmp_path / "run.json"
    path.write_text(cfg.model_dump_json())
    return path


def test_a_step_killed_mid_run_leaves_its_span_unfinished(tmp_path):
    proc = subprocess.run([sys.executable, "-c", KILLED, str(_settings(tmp_path, {"exporters": ["file"]}))],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL and "started" in proc.stdout, proc.stderr
    path = tmp_path / "results" / "t" / "smoke__calc-1" / "0" / "trace.jsonl"
    assert all(json.loads(line) for line in path.read_text().splitlines())
    spans = file_spans(tmp_path / "results" / "t", "smoke__calc-1")
    assert [(s["name"], s["attributes"].get("sandbatch.unfinished"), s["status"]["code"]) for s in spans] == [
        ("harness", True, 2)]


OFF = """
import asyncio, sys
from sandbatch import trace
from sandbatch.steps.common import parse_args
from sandbatch.steps.sandbox import build_spec
ctx = parse_args(["--config", sys.argv[1], "--task", "smoke__calc-1", "--repeat", "0"])

async def main():
    with trace.step(ctx, "sandbox"):
        import sandbatch.proxy, sandbatch.steps.harness, sandbatch.steps.grade
        sandbox = await ctx.provider.create(build_spec(ctx, "agent"))
        with trace.span("x"):
            await sandbox.exec("true", timeout=10)
        await sandbox.delete()
asyncio.run(main())
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""


def test_traces_off_import_nothing_and_write_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "-c", OFF, str(_settings(tmp_path, {}))], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    assert not list((tmp_path / "results").rglob("trace*.jsonl"))


def test_time_by_kind_counts_each_instant_once_for_the_most_specific_work():
    from sandbatch.trace import time_by_kind

    def span(name, start, end, **attrs):
        return {"name": name, "startTimeUnixNano": str(start * 10**9), "endTimeUnixNano": str(end * 10**9),
                "attributes": attrs}

    spans = [span("rollout", 0, 10), span("harness", 1, 6), span("sandbox.docker.exec", 2, 6),
             span("chat m", 3, 4, **{"openinference.span.kind": "LLM"}),  # while the agent's command runs
             span("grade.tests", 7, 9), span("sandbox.docker.exec", 7, 9),
             span("patch", 6, 8, **{"sandbatch.unfinished": True})]  # a killed step: left out
    assert time_by_kind(spans) == {"model": 1.0, "tests": 2.0, "sandbox": 3.0, "orchestration": 4.0}
