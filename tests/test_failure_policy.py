"""Infrastructure failures are retried, then recorded as infra_error and reported apart;
`sandbatch rerun-errors` plus the same command redoes exactly the failed part.

Failures are injected at the sandbox boundary: a `git` wrapper on PATH fails `git init`
(part of preparing a sandbox) for chosen roles and tasks, a fixed number of times.
"""

import json

import pytest

from ops_util import fake_git, records, run, sandbatch, sandboxes, smoke_rows, write_tasks
from workflow_util import metrics, rollouts

pytestmark = pytest.mark.slow
FLAKY, BROKEN, BAD_GRADER = "smoke__calc-1", "smoke__textutils-1", "smoke__inventory-1"


def test_retry_then_infra_error_then_rerun_errors(tmp_path):
    tasks = write_tasks(tmp_path / "tasks.jsonl", smoke_rows()[:3])
    args = ["--config", f"benchmark={{'tasks': '{tasks}'}}", "retries=2"]
    env = fake_git(tmp_path / "bin", [
        # the agent sandbox of FLAKY fails twice: the third attempt succeeds
        {"cmd": "init", "labels": {"role": "agent", "task": FLAKY}, "fail": 2},
        # BROKEN never gets an agent sandbox; BAD_GRADER never gets a grading sandbox
        {"cmd": "init", "labels": {"role": "agent", "task": BROKEN}, "fail": 1000},
        {"cmd": "init", "labels": {"role": "grade", "task": BAD_GRADER}, "fail": 1000},
    ])
    first = run(tmp_path, *args, env=env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]

    rows = {r["task_id"]: r for r in rollouts(tmp_path)}
    run_dir = tmp_path / "results" / "default"
    flaky = json.loads((run_dir / FLAKY / "0" / "sandbox.json").read_text())
    assert flaky["status"] == "ok" and flaky["attempt"] == 3
    assert rows[FLAKY]["status"] == "ok" and rows[FLAKY]["resolved"]
    # Snakemake truncates a retried job's log; the failed attempts are in its own output
    log = first.stdout + first.stderr
    assert f"sandbox {FLAKY}/0 (attempt 1/3): infra error [sandbox_prepare]" in log
    assert f"sandbox {FLAKY}/0 (attempt 2/3): infra error [sandbox_prepare]" in log

    assert rows[BROKEN]["status"] == "infra_error" and rows[BROKEN]["failed_phase"] == "sandbox"
    assert rows[BROKEN]["failure_class"] == "sandbox_prepare" and not rows[BROKEN]["resolved"]
    for name in ("sandbox.json", "harness.json", "patch.json", "grade.json"):
        rec = json.loads((run_dir / BROKEN / "0" / name).read_text())
        assert rec["status"] == "infra_error" and rec["failure_class"] == "sandbox_prepare", name
    assert rows[BAD_GRADER]["status"] == "infra_error" and rows[BAD_GRADER]["failed_phase"] == "grade"
    assert json.loads((run_dir / BAD_GRADER / "0" / "harness.json").read_text())["status"] == "ok"

    m = metrics(tmp_path)
    assert m["status_counts"] == {"ok": 1, "infra_error": 2}
    assert m["failure_classes"] == {"sandbox_prepare": 2}
    assert m["resolved_rate"]["value"] == pytest.approx(1 / 3)
    assert m["resolved_rate_excluding_infra_errors"] == {"value": 1.0, "numerator": 1, "denominator": 1}
    assert "infra errors | 66.7% (2/3)" in (run_dir / "report.md").read_text()
    st = json.loads(sandbatch("status", "default", "-d", str(tmp_path), "--json").stdout)
    assert st["failure_classes"] == {"sandbox_prepare": 2}
    assert st["steps"]["sandbox"] == {"ok": 2, "infra_error": 1}
    assert st["steps"]["grade"] == {"ok": 1, "infra_error": 2}
    assert sandboxes(tmp_path) == []
    # the gym export keeps infra errors out of the rollouts, as Gym keeps its failed rollouts
    exported = sandbatch("export", "--format", "gym", "default", "-d", str(tmp_path))
    assert exported.returncode == 0, exported.stderr
    gym = {name: [json.loads(line) for line in (run_dir / "gym" / name).read_text().splitlines()]
           for name in ("rollouts.jsonl", "rollouts_materialized_inputs.jsonl", "rollouts_failures.jsonl")}
    assert [(r["instance_id"], r["reward"]) for r in gym["rollouts.jsonl"]] == [(FLAKY, 1.0)]
    assert sorted((r["instance_id"], r["_ng_failure_class"]) for r in gym["rollouts_failures.jsonl"]) == [
        (BAD_GRADER, "sandbox_prepare"), (BROKEN, "sandbox_prepare")]
    assert all("reward" not in r for r in gym["rollouts_failures.jsonl"])
    assert [r["_ng_task_index"] for r in gym["rollouts_materialized_inputs.jsonl"]] == [0, 1, 2]

    before = records(tmp_path)
    listed = sandbatch("rerun-errors", "default", "-d", str(tmp_path), "-n")
    assert listed.returncode == 0, listed.stderr
    assert f"{BROKEN}/0: sandbox failed [sandbox_prepare]; would redo from sandbox" in listed.stdout
    assert f"{BAD_GRADER}/0: grade failed [sandbox_prepare]; would redo from grade" in listed.stdout
    assert "2 rollout(s) with infra_error" in listed.stdout
    assert records(tmp_path) == before  # a dry run deletes nothing

    done = sandbatch("rerun-errors", "default", "-d", str(tmp_path))
    assert done.returncode == 0 and "now run the same snakemake command" in done.stdout
    assert not (run_dir / BROKEN / "0" / "sandbox.json").exists()
    assert not (run_dir / BAD_GRADER / "0" / "grade.json").exists()
    assert (run_dir / BAD_GRADER / "0" / "harness.json").exists()

    # the infrastructure is fixed: the same command redoes only what failed
    again = run(tmp_path, *args)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    after = records(tmp_path)
    redone = sorted(k for k in after if before.get(k) != after[k] and not k.endswith("grade.log"))
    # the regraded rollout's grade.json changed, and its record index got the new grade's line
    assert all(BROKEN in k or k.endswith((f"{BAD_GRADER}/0/grade.json", f"{BAD_GRADER}/0/records.jsonl"))
               for k in redone), redone
    assert f"results/default/{BAD_GRADER}/0/grade.json" in redone
    assert f"results/default/{BROKEN}/0/harness.json" in redone
    rows = rollouts(tmp_path)
    assert all(r["status"] == "ok" and r["resolved"] for r in rows), rows
    assert metrics(tmp_path)["failure_classes"] == {}
