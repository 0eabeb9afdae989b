"""The workflow on the opensandbox provider against the REAL OpenSandbox server: the smoke
benchmark (SWE-bench family), SWE-bench Pro and Terminal-Bench rows with the oracle, the
`none` harness, real OpenCode in the sandboxes talking to the scripted model through the
rollout's proxy on this host, and API faults injected by a proxy in front of the server
(tests/opensandbox_proxy.py).

Each run has a run name of its own (the server is shared); at the end no sandbox of it
may be left on the server.
"""

import json

import pytest


from docker_fixtures import OPENCODE_PREFIX, agent_image, docker_base_image, docker_engine  # noqa: E402,F401
from harness_support import OPENCODE_SCRIPT, scripted_model_server  # noqa: E402
from opensandbox_proxy import FaultProxy  # noqa: E402
from real_opensandbox import IMAGE, real_opensandbox, reap_run  # noqa: E402,F401 (fixture)
from suite import unique_run  # noqa: E402
from test_traces import PHOENIX_GRPC, assert_phoenix_traces, phoenix  # noqa: E402
from workflow_util import REPO, SMOKE_TASKS, metrics, rollouts, snakemake, write_config  # noqa: E402

pytestmark = pytest.mark.slow
N_SMOKE = sum(1 for line in SMOKE_TASKS.read_text().splitlines() if line.strip())
PROBE_PREFIX = "mkdir -p /tmp/sandbatch "
FIX = REPO / "tests" / "fixtures" / "bench"


@pytest.fixture
def run_name(real_opensandbox):
    """A run name of this test's own; at the end none of its sandboxes may be left."""
    name = unique_run("osw")
    yield name
    left = reap_run(real_opensandbox, name)
    assert left == [], f"sandboxes left behind: {left}"


@pytest.fixture
def proxy(real_opensandbox):
    proxy = FaultProxy(real_opensandbox.url)
    yield proxy
    proxy.stop()


def _config(tmp_path, real, run, domain=None, opensandbox=None, sandbox=None, **extra):
    options = real.options(domain, **(opensandbox or {}))
    cfg = {"run": run, "retries": 1, "sandbox": {"provider": "opensandbox", "default_image": IMAGE,
                                                 "opensandbox": options, **(sandbox or {})}, **extra}
    return str(write_config(tmp_path, f"{run}.yaml", cfg))


def _why(rows):
    return [(r["instance_id"], r["status"], r["failure_class"], r["error"]) for r in rows]


def test_smoke_oracle_resolves_and_leaves_none(tmp_path, real_opensandbox, run_name):
    proc = snakemake(tmp_path, "--configfile", _config(tmp_path, real_opensandbox, run_name))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = rollouts(tmp_path, run_name)
    assert len(rows) == N_SMOKE
    assert all(r["resolved"] and r["status"] == "ok" for r in rows), _why(rows)
    # the steps deleted their own sandboxes: the end-of-run reaper found none
    manifest = json.loads((tmp_path / "results" / run_name / "manifest.json").read_text())
    assert manifest["sandboxes_reaped"] == 0


def test_none_harness_resolves_nothing(tmp_path, real_opensandbox, run_name):
    cfg = _config(tmp_path, real_opensandbox, run_name, harness={"name": "none"}, benchmark={"limit": 1})
    proc = snakemake(tmp_path, "--configfile", cfg)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = rollouts(tmp_path, run_name)
    assert len(rows) == 1 and rows[0]["status"] == "ok" and not rows[0]["resolved"], _why(rows)


def test_terminal_bench_oracle(tmp_path, real_opensandbox, run_name):
    """Terminal-Bench: solve.sh, then test.sh in a fresh sandbox; reward.txt, reward.json, and
    no reward (an infra error, never a 0). The smoke tasks are the SWE-bench family."""
    ids = ["hello-world", "json-reward", "no-reward"]
    rewrites = [{"prefix": f"ghcr.io/example/tb-{i}:20251031", "replace": IMAGE} for i in ids]
    # retried as a run is: a stream execd ends without the exit status on a loaded host is an
    # infrastructure error, which a run retries (the no-reward row is graded twice, both times the same)
    tb = _config(tmp_path, real_opensandbox, run_name, harness={"name": "oracle"}, retries=1,
                 sandbox={"image_rewrites": rewrites},
                 benchmark={"kind": "terminal_bench", "tasks": str(FIX / "terminal_bench"), "instance_ids": ids})
    proc = snakemake(tmp_path, "--configfile", tb)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r["instance_id"]: r for r in rollouts(tmp_path, run_name)}
    assert rows["hello-world"]["reward"] == 1.0 and rows["hello-world"]["resolved"], _why(rows.values())
    assert rows["json-reward"]["reward"] == 1.0 and rows["json-reward"]["resolved"], _why(rows.values())
    assert rows["no-reward"]["failure_class"] == "grading_no_reward" and not rows["no-reward"]["resolved"], \
        _why(rows.values())



def test_real_opencode_through_the_proxy(tmp_path, real_opensandbox, run_name, agent_image, monkeypatch):
    """OpenCode runs in each sandbox (a bridge-network container) and reaches the scripted
    model only through the rollout's proxy on this host, at the address the run derives
    (no advertise_host set): both tasks resolve, every model call went through the proxy
    with the upstream key the agent never held, and no sandbox is left (run_name checks).
    The run's traces go to Phoenix: each rollout's span tree, its model calls as LLM spans."""
    phoenix()
    monkeypatch.setenv("SCRIPTED_UPSTREAM_KEY", "sk-upstream-secret-7")
    tasks = ["smoke__calc-1", "smoke__textutils-1"]
    harness = {"name": "opencode", "config": {"install": {"method": "path", "path": f"{OPENCODE_PREFIX}/bin/opencode"}}}
    with scripted_model_server(OPENCODE_SCRIPT) as (url, model):
        cfg = _config(tmp_path, real_opensandbox, run_name, harness=harness, retries=0,
                      sandbox={"default_image": agent_image}, timeouts={"agent": 300},
                      benchmark={"instance_ids": tasks},
                      model={"name": "scripted", "base_url": url, "api_key_env": "SCRIPTED_UPSTREAM_KEY"},
                      traces={"exporters": ["otlp_grpc"]})
        # the standard variable names the collector (Phoenix's OTLP/gRPC port)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", PHOENIX_GRPC)
        proc = snakemake(tmp_path, "--configfile", cfg, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = rollouts(tmp_path, run_name)
    assert sorted(r["instance_id"] for r in rows) == tasks
    assert all(r["resolved"] and r["status"] == "ok" for r in rows), _why(rows)
    run_dir = tmp_path / "results" / run_name
    for task in tasks:
        calls = [json.loads(line) for line in (run_dir / task / "0" / "model_calls.jsonl").read_text().splitlines()]
        assert len(calls) >= 3 and all(c["status"] == 200 for c in calls), calls
        response = json.loads((run_dir / task / "0" / "response.json").read_text())
        assert [i["name"] for i in response["output"] if i["type"] == "function_call"] == ["bash", "bash"]
    chat = [r for r in model.requests if r["path"].endswith("/chat/completions")]
    assert len(chat) >= 6 and all(r["headers"].get("authorization") == "Bearer sk-upstream-secret-7" for r in chat)
    assert_phoenix_traces(run_dir, run_name, tasks, "opensandbox")


def test_swe_bench_pro_oracle(tmp_path, real_opensandbox, run_name, agent_image):
    """A SWE-bench Pro row: the repository uploaded to /app, before_repo_set_cmd, the row's
    run_script (which calls `python`, as Pro images have it) and parser."""
    pro = FIX / "swe_pro" / "tasks.jsonl"
    row = json.loads(pro.read_text().splitlines()[0])
    rewrites = [{"prefix": f"jefzda/sweap-images:{row['dockerhub_tag']}", "replace": agent_image}]
    cfg = _config(tmp_path, real_opensandbox, run_name, sandbox={"image_rewrites": rewrites},
                  benchmark={"kind": "swebench_pro", "tasks": str(pro)})
    proc = snakemake(tmp_path, "--configfile", cfg)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = rollouts(tmp_path, run_name)
    assert [r["instance_id"] for r in rows] == [row["instance_id"]]
    assert rows[0]["resolved"] and rows[0]["status"] == "ok", _why(rows)


def test_transient_faults_are_retried_and_a_slow_create_leak_is_reaped(tmp_path, real_opensandbox, run_name,
                                                                        proxy):
    """5xx and 429 on create, 502 on exec, a delete answered 404, and a create that outlives
    the client's timeout while the server makes its sandbox anyway: every rollout resolves,
    no command reaches a sandbox twice and the stray is deleted (run_name checks)."""
    proxy.add_fault(op="create", action="status", status=503, count=2)
    proxy.add_fault(op="create", action="status", status=429, retry_after=1, count=1)
    proxy.add_fault(op="create", action="delay", seconds=12, count=1)
    proxy.add_fault(op="exec", action="status", status=502, count=3)
    proxy.add_fault(op="delete", action="gone", count=1)
    cfg = _config(tmp_path, real_opensandbox, run_name, proxy.domain, benchmark={"limit": 2},
                  opensandbox={"connection": {"request_timeout": 5}})
    proc = snakemake(tmp_path, "--configfile", cfg)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = rollouts(tmp_path, run_name)
    assert len(rows) == 2 and all(r["resolved"] and r["status"] == "ok" for r in rows), _why(rows)
    stats = proxy.stats()
    assert stats["faults_pending"] == [] and stats["faults_fired"]["create:delay"] == 1
    assert not proxy.sent_twice(PROBE_PREFIX)


def test_faults_beyond_the_budget_become_infra_errors(tmp_path, real_opensandbox, run_name, proxy):
    proxy.add_fault(op="create", action="status", status=503, count=10_000)
    cfg = _config(tmp_path, real_opensandbox, run_name, proxy.domain, benchmark={"limit": 1},
                  opensandbox={"create": {"retries": 2, "backoff_initial": 0.05, "backoff_max": 0.2}})
    proc = snakemake(tmp_path, "--configfile", cfg)
    # every rollout an infrastructure error: the run graded nothing, and fails saying so
    assert proc.returncode == 1 and "graded nothing" in proc.stderr, proc.stderr[-3000:]
    rows = rollouts(tmp_path, run_name)
    assert len(rows) == 1
    assert all(r["status"] == "infra_error" and r["failed_phase"] == "sandbox" for r in rows)
    assert all(r["failure_class"].startswith("sandbox") for r in rows)
    m = metrics(tmp_path, run_name)
    assert m["infra_error_rate"]["value"] == 1.0 and m["resolved_rate_excluding_infra_errors"]["denominator"] == 0
    # the agent was never blamed: no harness ran, nothing was graded as a failure of the agent
    harness = json.loads(next((tmp_path / "results" / run_name).glob("*/0/harness.json")).read_text())
    assert harness["status"] == "infra_error" and harness["exit_code"] is None
