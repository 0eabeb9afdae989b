"""`sandbatch stop` ends a real run within a bounded time and leaves it resumable."""

import getpass
import json
import time

import pytest

from ops_util import run, sandbatch, sandboxes, smoke_rows, start, wait_for, write_tasks
from sandbatch.core.instance import read_instance
from sandbatch.ops.owners import LOCKS_DIR, locked, scan
from sandbatch.sandbox.local import default_root

pytestmark = pytest.mark.slow
GRACE = 10


@pytest.mark.parametrize("sigint", [True, False], ids=["sigint-handled", "sigint-ignored"])
def test_stop_during_grading_then_rerun_completes(tmp_path, sigint):
    flag = tmp_path / "slow"
    flag.touch()
    rows = smoke_rows()[:2]
    # grading of the first task hangs while the flag exists
    rows[0]["test_cmd"] = f"if [ -e {flag} ]; then sleep 300; fi; {rows[0]['test_cmd']}"
    tasks = write_tasks(tmp_path / "tasks.jsonl", rows)
    args = ["--config", f"benchmark={{'tasks': '{tasks}'}}"]
    proc = start(tmp_path, *args, sigint=sigint)
    try:
        wait_for(lambda: sandboxes(tmp_path, "grade") and (tmp_path / LOCKS_DIR).is_dir(), 120,
                 "a grading sandbox", proc)
        # the other rollout finishes meanwhile; the hung one is being graded
        other = tmp_path / "results/default/smoke__textutils-1/0"
        # a whole rollout (sandbox to grade) on a loaded machine
        wait_for(lambda: (other / "grade.json").exists() and (other / "response.json").exists(), 300,
                 "the other rollout's grade and response", proc)
        # and Snakemake has taken the finished jobs in (their incomplete markers are gone)
        wait_for(lambda: json.loads(sandbatch("status", "default", "-d", str(tmp_path), "--json").stdout)["done"] == 1,
                 120, "the other rollout counted as done", proc)
        t0 = time.monotonic()
        out = sandbatch("stop", "default", "-d", str(tmp_path), "--grace", str(GRACE))
        took = time.monotonic() - t0
        assert out.returncode == 0, out.stderr
        assert took < GRACE + 15, (took, out.stdout, out.stderr)
        assert "stopped Snakemake pid" in out.stdout, out.stdout
        assert proc.wait(timeout=5) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert scan(tmp_path) == []
    assert not locked(tmp_path)
    assert sandboxes(tmp_path) == []
    assert not (tmp_path / "results/default/smoke__calc-1/0/grade.json").exists()
    status = json.loads(sandbatch("status", "default", "-d", str(tmp_path), "--json").stdout)
    assert status["done"] == 1 and status["snakemake"]["running"] is False
    assert status["steps"]["grade"].get("interrupted", 0) + status["steps"]["grade"].get("pending", 0) == 1

    flag.unlink()
    done = run(tmp_path, *args)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(l) for l in (tmp_path / "results/default/rollouts.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["resolved"] for r in rows)
    assert sandboxes(tmp_path) == []


def test_stop_without_a_run_unlocks_and_reaps(tmp_path):
    """Nothing running: stale locks and leftover sandboxes of the run are still cleaned up."""
    rows = smoke_rows()[:1]
    tasks = write_tasks(tmp_path / "tasks.jsonl", rows)
    done = run(tmp_path, "--config", f"benchmark={{'tasks': '{tasks}'}}")
    assert done.returncode == 0, done.stderr[-3000:]
    (tmp_path / LOCKS_DIR).mkdir(parents=True)
    (tmp_path / LOCKS_DIR / "0.input.lock").write_text("x\n")
    instance = read_instance(tmp_path / "results" / "default")
    assert instance

    def leftover(name, **labels):
        d = default_root(tmp_path) / name
        (d / "work").mkdir(parents=True)
        (d / "meta.json").write_text(json.dumps({"labels": {"owner": getpass.getuser(), **labels}}))
        return d

    left = leftover("sb-left", run="default", instance=instance)
    other = leftover("sb-other", run="another", instance=instance)
    # the same run name and user, from another working directory (another instance)
    twin = leftover("sb-twin", run="default", instance="0123456789abcdef")
    out = sandbatch("stop", "default", "-d", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "no Snakemake" in out.stdout and "removed .snakemake/locks" in out.stdout
    assert "deleted 1 sandbox" in out.stdout
    assert not left.exists() and other.exists() and twin.exists()
