"""kill -9 at every point of every step, then the same command: nothing finished is lost or redone.

An uninterrupted run records every kill point its steps pass (sandbatch.core.killpoint:
after each create, prepare, command, file written and delete). Then, per kill mode, runs
of the same command are killed at those points one after another: each run dies at the
first point not yet fired and the next resumes it, until a run finishes; points that the
resumed paths no longer pass (a restored capture writes nothing) are fired in a further
series from an empty directory. After each series the rollout resolves as the uninterrupted
run did, the agent run and the patch were each recorded once (a finished agent run is never
redone, a captured patch never lost), a last run of the same command does nothing, and no
sandbox or process of the run is left.

Kill modes: `group` SIGKILLs Snakemake's whole process group from inside the step (a crashed
host: Snakemake never records the job; the next run's recovery deletes its outputs), with
every step in its job's own process as on Slurm; `step` SIGKILLs the step's own process, the
step server's forked child, so Snakemake sees the job fail, deletes its outputs and retries it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import psutil
import pytest

from ops_util import SNAKEMAKE, records, run, sandboxes, smoke_rows, stable_rows, write_tasks
from sandbatch.sandbox.local import default_root
from sandbatch.core import killpoint
from sandbatch.steps.forkserver import DISABLE
from docker_fixtures import containers, docker_base_image, docker_engine  # noqa: F401 (fixtures)
from suite import unique_run
from workflow_util import REPO, rollouts

pytestmark = pytest.mark.slow
ROLLOUT = "results/default/smoke__calc-1/0"
# group: every step in its job's own process, as on Slurm (a step's deletes then come before
# its job ends, and a kill after them is one Snakemake never recorded); step: the step
# server's forked child is the step's process
MODES = {"group": {killpoint.MODE: "group", DISABLE: "1"}, "step": {killpoint.MODE: "step"}}


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    return write_tasks(tmp_path_factory.mktemp("tasks") / "tasks.jsonl", smoke_rows()[:1])


def _args(tasks_file):
    # retries: in `step` mode one job is killed at each of its points in turn within one run
    return ["--config", f"benchmark={{'tasks': '{tasks_file}'}}", "retries=12"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tasks):
    """The uninterrupted run: its results and the kill points it passes, in order."""
    wd = tmp_path_factory.mktemp("reference")
    trace = wd / "trace"
    proc = run(wd, *_args(tasks), env={**os.environ, killpoint.TRACE: str(trace)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    points = list(dict.fromkeys(trace.read_text().split()))
    assert {"patch:deleted", "harness:wrote-harness.json", "grade:deleted", "sandbox:created"} <= set(points)
    return stable_rows(rollouts(wd)), points


def _saves(wd, name, rollout=ROLLOUT):
    """How often the record `name` was saved (each save appends a line to records.jsonl)."""
    lines = (wd / rollout / "records.jsonl").read_text().splitlines()
    return sum(json.loads(line)["record"] == name for line in lines)


def _left_processes(*dirs):
    """Processes of the run: working in its directory (Snakemake, the step server, the steps)
    or in one of its sandboxes."""
    roots = [os.path.realpath(d) for d in dirs]
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            cwd = os.path.realpath(proc.cwd())
        except (psutil.Error, OSError):
            continue
        if any(cwd == r or cwd.startswith(r + os.sep) for r in roots):
            found.append((proc.pid, proc.info["cmdline"]))
    return found


def _series(wd, args, env, points, fired, rollout=ROLLOUT):
    """Runs of the same command, each killed at the first point of `points` not yet fired,
    until one finishes. The agent run's outputs, once written whole, must never change."""
    env = {**env, killpoint.AT: ",".join(points), killpoint.FIRED: str(fired), killpoint.TRACE: str(wd / "trace")}
    agent = {}
    for _ in range(len(points) + 2):
        # a session of its own, as from a terminal: the group a `group` kill point kills
        proc = subprocess.run([*SNAKEMAKE, "-d", str(wd), *args], cwd=wd, env=env, capture_output=True,
                              text=True, timeout=600, start_new_session=True)
        (wd / "runs.log").open("a").write(proc.stdout + proc.stderr)
        harness = wd / rollout / "harness.json"
        if harness.exists() and (wd / rollout / "events.jsonl").exists():
            agent.setdefault("harness", harness.read_bytes())
            assert harness.read_bytes() == agent["harness"], "a finished agent run was redone"
        if proc.returncode == 0:
            return
        assert proc.returncode in (-9, 1), proc.stderr[-3000:]
    raise AssertionError(f"no run finished; see {wd / 'runs.log'}")


@pytest.mark.parametrize("mode", list(MODES))
def test_kill_at_every_point_then_the_same_command(tmp_path, tasks, reference, mode):
    rows, points = reference
    fired = tmp_path / "fired"
    env = {**os.environ, **MODES[mode]}
    t0, series = time.monotonic(), 0
    while True:
        left = [p for p in points if not (fired / p).exists()]
        if not left:
            break
        assert series < 4, f"points never reached after resuming: {left}"
        wd = tmp_path / f"series{series}"
        wd.mkdir()
        _series(wd, _args(tasks), env, left, fired)
        series += 1

        assert stable_rows(rollouts(wd)) == rows, "a rollout resolved otherwise than uninterrupted"
        # each finished once: its capture committed once (steps.kept), its record saved once
        trace = (wd / "trace").read_text().split()
        for step, record in (("harness", "harness.json"), ("patch", "patch.json")):
            assert trace.count(f"{step}:wrote-manifest.json") == 1, f"{step}: its finished outputs were redone"
            assert _saves(wd, record) == 1, f"{step}: its record was saved again"
        before = records(wd)
        again = run(wd, *_args(tasks))
        assert again.returncode == 0, again.stderr[-3000:]
        assert records(wd) == before, "the same command once more redid something"
        assert sandboxes(wd) == [], "a sandbox was left"
        assert _left_processes(wd, default_root(wd)) == [], "a process of the run was left"
    print(f"{mode}: {len(points)} kill points in {series} series, {time.monotonic() - t0:.0f} s")


def test_docker_kill_after_the_agent_run_and_after_the_agent_sandbox_is_deleted(tmp_path, docker_engine,
                                                                                docker_base_image):
    """The same in containers, at the two points that lost work before: a run killed once the
    agent run is written, and once the patch is out and the agent's container deleted."""
    run = unique_run("kill")
    args = ["--configfile", str(REPO / "config" / "smoke_docker.yaml"), "--config", f"run={run}",
            f"sandbox={{'default_image': '{docker_base_image}'}}", "benchmark={'limit': 1}"]
    rollout = f"results/{run}/smoke__calc-1/0"
    points = ["harness:linked-harness.json", "patch:deleted"]
    _series(tmp_path, args, {**os.environ, **MODES["group"]}, points, tmp_path / "fired", rollout)
    assert all((tmp_path / "fired" / p).exists() for p in points)
    (row,) = rollouts(tmp_path, run)
    assert row["resolved"], row
    trace = (tmp_path / "trace").read_text().split()
    assert trace.count("harness:ran") == 1 and trace.count("patch:extracted") == 1, "finished work was redone"
    assert _saves(tmp_path, "harness.json", rollout) == 1 and _saves(tmp_path, "patch.json", rollout) == 1
    left = containers(docker_engine, run=run)
    assert left == []
