"""The local Slurm service (scripts/services/slurm.sh) runs batch jobs, as the workflow needs."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from services import need
from slurm_util import jobs_seen_since, slurm_unavailable, wait_for_job

REPO = Path(__file__).resolve().parents[1]
# one Slurm node: its CPUs are not shared with the other Slurm tests (conftest.py)
pytestmark = pytest.mark.xdist_group("slurm")
SERVICE = REPO / "scripts" / "services" / "slurm.sh"



@pytest.fixture(autouse=True)
def _slurm():
    why = slurm_unavailable()
    need(why and f"Slurm not usable here: {why}")


def sbatch(tmp_path: Path, command: str) -> str:
    out = subprocess.run(
        ["sbatch", "--parsable", "-t", "2", "--mem", "32", "-o", str(tmp_path / "%j.out"),
         "--wrap", command],
        capture_output=True, text=True, timeout=30, cwd=tmp_path, check=True, stdin=subprocess.DEVNULL,
    )
    return out.stdout.strip().split(";")[0]


def test_batch_job_runs_and_is_recorded(tmp_path):
    t0 = time.time()
    job_id = sbatch(tmp_path, 'echo "job=$SLURM_JOB_ID partition=$SLURM_JOB_PARTITION"')
    assert wait_for_job(job_id, timeout=120) == "COMPLETED"
    log = tmp_path / f"{job_id}.out"
    deadline = time.monotonic() + 30  # slurmd may close the file a moment after the state flips
    while not (log.is_file() and log.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert log.is_file() and log.read_text().startswith(f"job={job_id} partition="), \
        f"{log} 30 s after the job completed: {log.read_text() if log.is_file() else 'missing'}"
    assert job_id in [job.id for job in jobs_seen_since(t0)]


def test_failed_job_is_reported_failed(tmp_path):
    job_id = sbatch(tmp_path, "exit 3")
    assert wait_for_job(job_id, timeout=120) == "FAILED"


def test_squeue_keeps_finished_jobs_long_enough_for_the_profile():
    """The Slurm profile polls squeue; the plugin falls back to sacct (no data here) unless
    MinJobAge >= 3 x init-seconds-before-status-checks."""
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    init = profile["slurm-init-seconds-before-status-checks"]
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=15).stdout
    line = next(line for line in config.splitlines() if line.startswith("MinJobAge"))
    min_job_age = int(line.split("=")[1].split()[0])
    assert min_job_age >= 3 * init


@pytest.mark.skipif(os.geteuid() != 0, reason="scripts/services/slurm.sh needs root")
def test_service_script_is_a_noop_when_up():
    started = time.monotonic()
    done = subprocess.run(["bash", str(SERVICE)], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert "already up" in done.stdout
    # seconds of checks on a loaded machine, not the minutes of an install or a restart
    assert time.monotonic() - started < 30
