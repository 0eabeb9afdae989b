"""The smoke benchmark through the workflow on the opensandbox provider: the real SDK talks
HTTP to the stand-in server, with faults injected."""

import json

import pytest

pytest.importorskip("aiohttp", reason="the stand-in server needs the test extra: pip install -e .[test]")

from opensandbox_server import StandIn  # noqa: E402
from workflow_util import SMOKE_TASKS, metrics, rollouts, snakemake, write_config  # noqa: E402

pytestmark = pytest.mark.slow
N_SMOKE = sum(1 for line in SMOKE_TASKS.read_text().splitlines() if line.strip())
PROBE_PREFIX = "mkdir -p /tmp/sandbatch "


@pytest.fixture
def server(tmp_path_factory):
    srv = StandIn.in_thread(tmp_path_factory.mktemp("standin"))
    yield srv
    srv.stop()


def _config(tmp_path, server, run, **extra):
    cfg = {"run": run, "retries": 1, "sandbox": {
        "provider": "opensandbox", "default_image": "sandbatch/base:bookworm",
        "opensandbox": {
            "connection": {"domain": server.domain, "protocol": "http", "api_key_env": None,
                           "request_timeout": 10},
            "create": {"backoff_initial": 0.05, "backoff_max": 0.2, "ready_timeout": 10},
            "probe": {"interval": 0.05, "timeout": 15},
            "operations": {"backoff_initial": 0.02, "backoff_max": 0.1},
        }}, **extra}
    return write_config(tmp_path, f"{run}.yaml", cfg)


def _commands_run_twice(server):
    """Commands that ran more than once in the same sandbox (the probe may, by design)."""
    return {(sid, t): n for sid, per in server.stats()["commands_per_sandbox"].items()
            for t, n in per.items() if n > 1 and not t.startswith(PROBE_PREFIX)}


def test_transient_faults_are_retried_and_every_rollout_resolves(tmp_path, server):
    server.add_fault(op="create", action="status", status=503, count=2)
    server.add_fault(op="create", action="status", status=429, retry_after=1, count=1)
    server.add_fault(op="exec", action="status", status=502, count=3)
    server.add_fault(op="delete", action="status", status=404, count=1)
    proc = snakemake(tmp_path, "--configfile", str(_config(tmp_path, server, "os-ok")))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = rollouts(tmp_path, "os-ok")
    assert len(rows) == N_SMOKE
    assert all(r["resolved"] and r["status"] == "ok" for r in rows), [(r["instance_id"], r["failure_class"]) for r in rows]
    stats = server.stats()
    assert stats["live"] == 0, stats["ids"]
    assert not _commands_run_twice(server)


def test_faults_beyond_the_budget_become_infra_errors_and_nothing_leaks(tmp_path, server):
    server.add_fault(op="create", action="status", status=503, count=10_000)
    proc = snakemake(tmp_path, "--configfile", str(_config(tmp_path, server, "os-down")))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = rollouts(tmp_path, "os-down")
    assert len(rows) == N_SMOKE
    assert all(r["status"] == "infra_error" and r["failed_phase"] == "sandbox" for r in rows)
    assert all(r["failure_class"].startswith("sandbox") for r in rows)
    m = metrics(tmp_path, "os-down")
    assert m["infra_error_rate"]["value"] == 1.0 and m["resolved_rate_excluding_infra_errors"]["denominator"] == 0
    # the agent was never blamed: no harness ran, nothing was graded as a failure of the agent
    harness = json.loads(next((tmp_path / "results/os-down").glob("*/0/harness.json")).read_text())
    assert harness["status"] == "infra_error" and harness["exit_code"] is None
    assert server.stats()["live"] == 0


def test_slow_create_leak_is_reaped(tmp_path, server):
    # the first create outlives the client's timeout but still makes a sandbox server-side
    server.add_fault(op="create", action="delay", seconds=12, visible=True, count=1)
    proc = snakemake(tmp_path, "--configfile", str(_config(tmp_path, server, "os-slow")),
                     "--config", "benchmark={'limit': 1}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["resolved"] for r in rollouts(tmp_path, "os-slow")] == [True]
    assert server.stats()["live"] == 0
