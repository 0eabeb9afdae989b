"""A run SIGKILLed at any point resumes with the same command and ends with the same results.

After the kill the stale `.snakemake/locks` are cleared by the next run itself (see
sandbatch.ops.owners), `rerun-incomplete` (profile) redoes the killed jobs, a step that had
finished is not done again, an interrupted agent sandbox is replaced instead of reused,
and the leftover sandboxes of the killed jobs are reaped by the aggregate.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ops_util import (fake_git, kill_group, records, run, sandbatch, sandboxes, smoke_rows, stable_rows, start,
                      wait_for, write_tasks)
from sandbatch.ops.owners import LOCKS_DIR, locked, scan
from sandbatch.ops.stop import kill_tree
from sandbatch.ops.status import incomplete_outputs
from sandbatch.sandbox.local import default_root
from suite import unique_run
from workflow_util import REPO, rollouts

pytestmark = pytest.mark.slow
SLOW_TASK = "smoke__calc-1"
# the steps' declared outputs (grade.log, written while grading, is not one)
OUTPUTS = {"sandbox.json", "events.jsonl", "harness.json", "model_calls.jsonl", "response.json", "patch.diff",
           "patch.json", "grade.json"}


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    d = tmp_path_factory.mktemp("tasks")
    flag = d / "slow-grading"
    rows = smoke_rows()[:3]
    # while the flag exists, grading of the first task hangs (the kill point "during grading")
    rows[0]["test_cmd"] = f"if [ -e {flag} ]; then sleep 300; fi; {rows[0]['test_cmd']}"
    return write_tasks(d / "tasks.jsonl", rows), flag


def _args(tasks_file):
    return ["--config", f"benchmark={{'tasks': '{tasks_file}'}}"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tasks):
    wd = tmp_path_factory.mktemp("reference")
    proc = run(wd, *_args(tasks[0]))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return stable_rows(rollouts(wd))


def _first(wd, name):
    return lambda: list(wd.glob(f"results/default/*/0/{name}"))


def _harness_started(wd):
    """The slow task's agent has started (the marker the harness step leaves in its sandbox)."""
    def started():
        for d in default_root(wd).glob("*/tmp/.sandbatch-harness-started"):
            try:
                meta = json.loads((d.parents[1] / "meta.json").read_text())
            except (OSError, ValueError):  # being deleted
                continue
            if meta["labels"]["task"] == SLOW_TASK:
                return True
        return False
    return started


KILL_POINTS = {
    "after-first-sandbox": lambda wd: _first(wd, "sandbox.json"),
    "during-harness": lambda wd: _harness_started(wd),
    "after-first-harness": lambda wd: _first(wd, "harness.json"),
    # the slow task's own grading sandbox (it hangs there): another task's may be there a moment
    "during-grading": lambda wd: lambda: sandboxes(wd, "grade", SLOW_TASK),
    "after-4-seconds": None,
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_sigkill_then_same_command_resumes(tmp_path, tasks, reference, point):
    tasks_file, grading_flag = tasks
    harness_flag = tmp_path / "slow-harness"
    # "after-4-seconds" holds grading too, so the run is surely still going when killed
    flag = {"during-harness": harness_flag, "during-grading": grading_flag,
            "after-4-seconds": grading_flag}.get(point)
    if flag:
        flag.touch()
    # while its flag exists, the oracle's `git apply` of the first task hangs ("during harness")
    env = fake_git(tmp_path / "bin", [{"cmd": "apply", "arg": "gold.patch", "sleep": 300,
                                       "labels": {"task": SLOW_TASK}, "flag": str(harness_flag)}])
    proc = start(tmp_path, *_args(tasks_file), env=env)
    try:
        if KILL_POINTS[point] is None:
            wait_for(_first(tmp_path, "sandbox.json"), 120, "the first sandbox", proc)
            time.sleep(4)
        else:
            wait_for(KILL_POINTS[point](tmp_path), 120, point, proc)
    finally:
        kill_group(proc)
    if flag:
        flag.unlink()
    assert locked(tmp_path), "SIGKILL leaves Snakemake's locks behind"

    # what had finished before the kill: records not marked incomplete by Snakemake
    marked = incomplete_outputs(tmp_path)
    before = {k: v for k, v in records(tmp_path).items()
              if str(tmp_path / k) not in marked and k.rsplit("/", 1)[1] in OUTPUTS}
    done_before = {p.parent for p in tmp_path.glob("results/default/*/0/grade.json")
                   if (p.parent / "response.json").exists()
                   and not {str(p), str(p.parent / "response.json")} & marked}
    status = json.loads(sandbatch("status", "default", "-d", str(tmp_path), "--json").stdout)
    assert status["done"] == len(done_before)
    assert status["snakemake"]["running"] is False
    started_harness = {p.parent.name for p in tmp_path.glob("results/default/*/0/sandbox.json")}
    slow_handle = tmp_path / f"results/default/{SLOW_TASK}/0/sandbox.json"
    used_id = json.loads(slow_handle.read_text())["sandbox_id"] if point == "during-harness" else None
    grading = [d.name for d in sandboxes(tmp_path, "grade")]  # the killed grade steps' sandboxes

    again = run(tmp_path, *_args(tasks_file), env=env)
    (tmp_path / "rerun.out").write_text(again.stdout + again.stderr)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "removed stale Snakemake locks" in again.stderr

    after = records(tmp_path)
    for name, (mtime, content) in before.items():
        # sandbox.json too: a harness step that replaces a used or dead sandbox records that itself
        assert after[name] == (mtime, content), f"{name} was redone although it had finished"
    assert stable_rows(rollouts(tmp_path)) == reference
    assert sandboxes(tmp_path) == [], "the killed jobs' sandboxes were not reaped"
    manifest = json.loads((tmp_path / "results/default/manifest.json").read_text())
    if point == "during-harness":
        handle = json.loads((tmp_path / f"results/default/{SLOW_TASK}/0/harness.json").read_text())["sandbox"]
        assert handle and handle["recreated"] == 1, "the half-used agent sandbox was reused"
        assert used_id and handle["sandbox_id"] != used_id
        assert not (default_root(tmp_path) / used_id).exists(), "the half-used sandbox was left"
    assert isinstance(manifest["sandboxes_reaped"], int)
    if point == "during-grading":
        # each deleted by its grade step's rerun (which noted it: steps.kept), else by the reaper
        logs = "".join(p.read_text() for p in tmp_path.glob("results/default/*/0/logs/grade.log"))
        rerun_deleted = sum(f"deleted sandbox {i} left by an interrupted attempt" in logs for i in grading)
        assert grading and rerun_deleted + manifest["sandboxes_reaped"] >= len(grading), \
            "the killed grading sandbox was left behind"
    assert started_harness  # the kill happened after the run had started work


def test_ctrl_c_while_the_patch_is_taken_redoes_that_agent_run(tmp_path, tasks, reference):
    """Ctrl-C while a patch step reads the agent's sandbox: the run's end deletes that sandbox,
    and with it the agent's work, so the next run redoes that agent run rather than ending the
    rollout in an infrastructure error (sandbox_gone) for a run that was merely interrupted."""
    tasks_file, _ = tasks
    flag = tmp_path / "slow-patch"
    flag.touch()
    # while the flag exists, the patch step's `git diff --cached` in the slow task's sandbox hangs
    reached = tmp_path / "in-git-diff"
    env = fake_git(tmp_path / "bin", [{"cmd": "-c", "arg": "--cached", "sleep": 300, "flag": str(flag),
                                       "reached": str(reached), "labels": {"task": SLOW_TASK, "role": "agent"}}])
    rollout = tmp_path / f"results/default/{SLOW_TASK}/0"
    proc = start(tmp_path, *_args(tasks_file), env=env)
    try:
        # in its `git diff` (the wrapper says so before it hangs), not a guessed second after the step began
        wait_for(reached.exists, 120, "the slow task's patch step in its `git diff`", proc)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    flag.unlink()
    first = (tmp_path / "snakemake.out").read_text()
    assert proc.returncode != 0, first[-3000:]
    assert sandboxes(tmp_path) == [], "sandboxes left after Ctrl-C"
    assert f"will be redone by the next run: {SLOW_TASK}/0" in first, first[-3000:]
    assert not (rollout / "harness.json").exists() and (rollout / "sandbox.json").exists()

    again = run(tmp_path, *_args(tasks_file), env=env)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    rows = rollouts(tmp_path)
    assert [r["task_id"] for r in rows if not r["resolved"] or r["failure_class"]] == [], rows
    assert stable_rows(rows) == reference
    handle = json.loads((rollout / "harness.json").read_text())["sandbox"]
    assert handle and handle["recreated"] == 1, "the agent run was not redone in a new sandbox"
    assert sandboxes(tmp_path) == []


# srun takes both CPUs of the one Slurm node: not beside the other Slurm tests (conftest.py)
@pytest.mark.parametrize("wrapper", ["timeout", "nohup", pytest.param("srun", marks=pytest.mark.xdist_group("slurm"))])
def test_sigkill_under_a_wrapper_then_same_command_resumes(tmp_path, tasks, reference, wrapper):
    """`timeout 600 snakemake ...` (and nohup, srun) killed with -9, then the same command:
    the wrapper of the new run names snakemake in its argv but is not a live Snakemake."""
    tasks_file, grading_flag = tasks
    if wrapper == "srun":
        from slurm_util import slurm_unavailable
        from services import need

        need(slurm_unavailable())
    job = unique_run("sandbatch-test")  # `scancel -n` below ends this job only, no other suite's
    prefix = {"timeout": ["timeout", "600"], "nohup": ["nohup"],
              "srun": ["srun", "-J", job, "-t", "15", "-c", "2"]}[wrapper]
    cmd = [*prefix, str(Path(sys.executable).parent / "snakemake"), "-s", str(REPO / "Snakefile"), "--cores", "2",
           "-d", str(tmp_path), *_args(tasks_file)]
    grading_flag.touch()
    try:
        with open(tmp_path / "snakemake.out", "ab") as out:
            proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(KILL_POINTS["during-grading"](tmp_path), 300, "grading", proc)
        finally:
            kill_group(proc)
            # under srun Snakemake is no child of the killed srun: kill it (and its jobs) by itself,
            # and end the allocation the dead srun held (as a lost node's would end)
            kill_tree(scan(tmp_path))
            if wrapper == "srun":
                subprocess.run(["scancel", "-n", job], check=False, timeout=60)
    finally:
        grading_flag.unlink()
    assert locked(tmp_path)
    again = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "removed stale Snakemake locks" in again.stderr
    assert stable_rows(rollouts(tmp_path)) == reference
    assert sandboxes(tmp_path) == []
