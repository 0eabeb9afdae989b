"""`sandbatch run` and the run's console, through the real workflow (local provider, smoke
tasks, oracle): the config-free form with --set, the resolved config in the run's directory,
short console lines with progress, the summary as the last lines; Ctrl-C (SIGINT to the
process group) stops the run in one line with no traceback and no sandbox left, and the same
command resumes it without redoing what had finished. Plus the cheap refusals (a bad --set,
a dotted `snakemake --config` key), the summary's infrastructure-error line and the ETA's
arithmetic."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ops_util import sandboxes, wait_for
from sandbatch.ops.console import ProgressClock
from sandbatch.reporting.summary import summary_lines
from workflow_util import SMOKE_TASKS, metrics, snakemake

RUN = "r"
# the config-free form, with an override, against the smoke tasks wherever the test runs
COMMAND = ["run", "--run", RUN, "--benchmark", "smoke", "--tasks", str(SMOKE_TASKS), "--harness", "oracle",
           "--provider", "local", "--limit", "1", "--repeats", "2", "--set", "timeouts.grade=600", "--cores", "2"]


def sandbatch_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "sandbatch.cli", *args]


def lines_of(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines()


@pytest.mark.slow
def test_run_interrupted_then_resumed(tmp_path):
    out = tmp_path / "first.out"
    with open(out, "wb") as fh:
        proc = subprocess.Popen(sandbatch_cmd(*COMMAND), cwd=tmp_path, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # a sandbox step has finished: Ctrl-C lands while later steps of its rollout run
        wait_for(lambda: any("done sandbox " in ln for ln in lines_of(out)), 180,
                 "a finished sandbox step on the console", proc)
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    first = lines_of(out)
    assert code == 130, first
    said = [ln for ln in first if ln.startswith("sandbatch: interrupted: ")]
    assert len(said) == 1 and first[-1] == said[0], first
    assert "the same command resumes the run" in said[0]
    text = "\n".join(first)
    assert "Traceback" not in text and "KeyboardInterrupt" not in text and "Error in rule" not in text, text
    assert sandboxes(tmp_path) == [], "sandboxes left after Ctrl-C"
    # the sandbox steps the console said were done (one still running may have written its record)
    done = [re.match(r"\[[\d:]+\] done sandbox (\S+)/(\d+):", ln) for ln in first]
    finished = {p: p.stat().st_mtime_ns for p in (tmp_path / "results" / RUN / m[1] / m[2] / "sandbox.json"
                                                  for m in done if m)}
    assert finished, first

    again = subprocess.run(sandbatch_cmd(*COMMAND), cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    console = again.stderr.splitlines()
    assert all(len(ln) <= 200 for ln in console), max(console, key=len)
    assert any("ETA " in ln and " rollouts graded" in ln for ln in console), console
    # the summary, once, as the last lines
    assert console[-3:] == [
        f"sandbatch: run {RUN}: 2 rollouts of 1 tasks: 2 resolved (100.0% of 2 graded), 0 unresolved, "
        "0 infrastructure errors",
        "sandbatch: pass@1 100.0%, pass@2 100.0%",
        f"sandbatch: report results/{RUN}/report.md, viewer results/{RUN}/report/view/index.html",
    ], console[-6:]
    assert sum(ln.startswith(f"sandbatch: run {RUN}:") for ln in console) == 1
    # what had finished before Ctrl-C was not done again
    assert {p: p.stat().st_mtime_ns for p in finished} == finished
    assert metrics(tmp_path, RUN)["rollouts"] == 2 and sandboxes(tmp_path) == []
    resolved = yaml.safe_load((tmp_path / "results" / RUN / "config.yaml").read_text())
    assert (resolved["run"], resolved["repeats"], resolved["benchmark"]["limit"], resolved["timeouts"]["grade"],
            resolved["harness"]["name"], resolved["sandbox"]["provider"]) == (RUN, 2, 1, 600, "oracle", "local")
    assert resolved["benchmark"]["tasks"] == str(SMOKE_TASKS)


def test_run_plan_of_config_files_and_refusals(tmp_path):
    cfg = tmp_path / "my.yaml"
    cfg.write_text(json.dumps({"run": "plan", "benchmark": {"tasks": str(SMOKE_TASKS), "limit": 3}}))
    plan = subprocess.run(sandbatch_cmd("run", str(cfg), "--set", "repeats=2", "--set", "benchmark.limit=1", "-n"),
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert plan.returncode == 0, plan.stderr[-3000:]
    # a plan: one line per job, 1 task x 2 repeats (the files, then --set), no summary, nothing written
    planned = [ln for ln in (plan.stdout + plan.stderr).splitlines() if ln.startswith("would run grade ")]
    assert sorted(planned) == ["would run grade smoke__calc-1/0", "would run grade smoke__calc-1/1"], plan.stdout
    assert "sandbatch: run plan:" not in plan.stderr and not (tmp_path / "results").exists()

    bad = subprocess.run(sandbatch_cmd("run", "--run", "bad", "--set", "repeats=0"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.splitlines() == [
        "sandbatch: error: --set: repeats: 0 is too small; it must be >= 1"], bad.stderr
    assert not (tmp_path / "results" / "bad").exists()

    # Snakemake refuses a dotted --config key before the workflow is read: one line with the fix
    dotted = snakemake(tmp_path, "-n", "--config", "harness.name=none", "run=x")
    assert dotted.returncode == 1 and "Traceback" not in dotted.stderr, dotted.stderr
    assert [ln for ln in dotted.stderr.splitlines() if ln.startswith("sandbatch: ")] == [
        "sandbatch: error: --config harness.name=none: Snakemake's --config takes no dotted keys; write "
        "--config 'harness={name: none}' instead, or run `sandbatch run --set harness.name=none`"], dotted.stderr
    # the form it suggests is taken
    nested = snakemake(tmp_path, "-n", "--configfile", str(cfg), "--config", "harness={name: none}")
    assert nested.returncode == 0, nested.stderr[-3000:]
    valid = subprocess.run(sandbatch_cmd("validate", str(cfg), "--config", "harness.name=none"), cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert valid.returncode == 0 and yaml.safe_load(valid.stdout)["harness"]["name"] == "none", valid.stderr


def test_summary_names_infra_errors_by_class(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps({
        "tasks": 3, "rollouts": 6, "resolved": 2, "pass_at_k": {"2": 33.3, "1": 25.0},
        "resolved_rate_excluding_infra_errors": {"value": 0.5, "numerator": 2, "denominator": 4},
        "infra_error_rate": {"value": 0.333, "numerator": 2, "denominator": 6},
        "infra_error_classes": {"sandbox_prepare": 1, "model_unreachable": 1}}))
    assert summary_lines(tmp_path, "x") == [
        "sandbatch: run x: 6 rollouts of 3 tasks: 2 resolved (50.0% of 4 graded), 2 unresolved, "
        "2 infrastructure errors",
        "sandbatch: infrastructure errors by class: sandbox_prepare 1, model_unreachable 1; "
        "`sandbatch rerun-errors x` drops them, and the same command redoes them",
        "sandbatch: pass@1 25.0%, pass@2 33.3%",
        f"sandbatch: report {tmp_path / 'report.md'}",
    ]
    assert summary_lines(tmp_path / "missing") == []


def test_eta_from_rule_means_running_jobs_and_parallelism():
    clock = ProgressClock()
    clock.planned({"agent": 3, "aggregate": 1, "total": 4})
    clock.started(1, "agent", "agent t/0", now=0.0)
    clock.started(2, "agent", "agent t/1", now=0.0)
    assert clock.eta(5.0) is None  # nothing finished: no estimate
    clock.finished(1, now=10.0)
    clock.started(3, "agent", "agent t/2", now=10.0)
    # left: 2 agents (10 s each) + the aggregate (unseen: the mean job, 10 s) = 30 job-seconds,
    # less the 10 + 2 s the running ones have done; 10 job-seconds in 12 s is no parallelism
    assert clock.eta(12.0) == pytest.approx(18.0)
    clock.finished(2, now=12.0)  # 12 s: agents now average 11 s, 22 job-seconds done in 12 s
    assert clock.eta(12.0) == pytest.approx((11 + 11 - 2) / (22 / 12))
