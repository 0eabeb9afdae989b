"""A run asked for more rollouts at once than the host's limits hold queues them: open
files (ulimit -n, soft and hard) and tasks (a pids cgroup, which counts every thread)
lowered, C=200."""

import os
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from services import need
from workflow_util import REPO, rollouts, write_config

PIDS = Path("/sys/fs/cgroup/pids")
NOTE = "rollouts at once, not 200 (concurrency): this host's "


def pids_cgroup(limit: int) -> Path:
    """A fresh pids cgroup (cgroup v1) holding at most `limit` processes, or `missing`."""
    need(None if os.access(PIDS, os.W_OK) else f"{PIDS} is not writable (no cgroup v1 pids controller, or not root)")
    group = PIDS / f"sandbatch-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    (group / "pids.max").write_text(str(limit))
    return group


def remove(group: Path) -> None:
    """Remove the cgroup once its last process (a step's deferred delete) is gone."""
    deadline = time.monotonic() + 60
    while (left := (group / "cgroup.procs").read_text().split()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"processes still in {group} 60 s after the run: {left}"
    group.rmdir()


def run(tmp_path: Path, *args: str, files: int | None = None, group: Path | None = None) -> subprocess.CompletedProcess:
    cfg = write_config(tmp_path, "limits.json", {"run": "limits", "repeats": 20, "concurrency": 200, "retries": 0,
                                                 "harness": {"name": "none"}})

    def limit():  # in the child, before Snakemake starts: what its whole process tree is held to
        if files:
            resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
        if group:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--cores", "400",
           "--configfile", str(cfg), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=tmp_path, preexec_fn=limit)


def test_the_open_files_limit_lowers_the_rollouts_at_once(tmp_path):
    plan = run(tmp_path, "-n", files=512)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert f"sandbatch: 32 {NOTE}open files limit (ulimit -n) 512 holds no more" in plan.stderr


def test_the_process_limit_lowers_the_rollouts_at_once(tmp_path):
    group = pids_cgroup(480)
    try:
        plan = run(tmp_path, "-n", group=group)
    finally:
        remove(group)
    assert plan.returncode == 0, plan.stderr[-2000:]
    # 480 less Snakemake's own (320) and the few tasks of the plan itself, 16 per rollout
    assert f"sandbatch: 9 {NOTE}pids cgroup limit 480 holds no more" in plan.stderr


@pytest.mark.slow
def test_a_run_at_c200_above_the_limits_queues_and_every_rollout_completes(tmp_path):
    # unlimited, all 100 rollouts would run at once: ~530 tasks at the peak (Snakemake's own
    # timer threads alone ~180), ~500 descriptors in Snakemake alone; held to 480, 9 run at once
    group = pids_cgroup(480)
    try:
        proc = run(tmp_path, files=512, group=group)
        refused = (group / "pids.events").read_text().split()  # "max N": forks the limit refused
    finally:
        remove(group)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert NOTE in proc.stderr
    rows = rollouts(tmp_path, "limits")
    assert len(rows) == 100
    assert not [r for r in rows if r["status"] == "infra_error"]
    assert "Too many open files" not in proc.stderr and "Resource temporarily unavailable" not in proc.stderr
    assert refused == ["max", "0"]
