"""Asking the local Slurm cluster what ran, for tests that must prove jobs went through it.

Without an accounting database `sacct` has no data; `squeue --states=all` lists finished
jobs for MinJobAge seconds, and the job completion log (JobCompLoc, jobcomp/filetxt, written
by scripts/services/slurm.sh) keeps the rest. `jobs_seen_since` reads both.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

# `planned`: idle, held by the backfill scheduler for a job about to start (Slurm 22.05+); a job
# submitted then queues behind it as on any busy node
READY_STATES = {"idle", "mixed", "allocated", "completing", "planned"}
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
                "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


@dataclass(frozen=True)
class SlurmJob:
    id: str
    name: str  # the executor plugin names every job of one run by its run UUID
    state: str
    submitted: float  # epoch seconds (Slurm reports whole seconds)
    comment: str = ""  # the executor plugin writes rule_<rule or group>[_wildcards_<...>]
    ended: float | None = None  # epoch seconds (whole), once the job has ended


def _run(*cmd: str, timeout: float = 15) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def slurm_unavailable(wait: float = 120) -> str | None:
    """None when a job can be submitted now, else the reason (for pytest.skip).

    A loaded host can leave the node briefly not responding (`idle*`) or the controller slow
    to answer, after a killed job above all: that is polled for up to `wait` seconds (the
    SlurmdTimeout scripts/services/slurm.sh sets: after it slurmctld calls the node down), and
    the reason names the last state seen. A controller that is down is said at once."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "Slurm client tools (sinfo, sbatch) not installed: run scripts/services/slurm.sh as root"
    deadline = time.monotonic() + wait
    while True:
        why, passing = _not_ready()
        if why is None or not passing:
            return why
        if time.monotonic() >= deadline:
            return f"{why} (still so after {wait:.0f} s)"
        time.sleep(2)


def _not_ready() -> tuple[str | None, bool]:
    """Why no job can be submitted now (None: it can), and whether that may pass by itself."""
    try:
        ping = _run("scontrol", "ping")
        states = _run("sinfo", "-h", "-o", "%T")
    except subprocess.TimeoutExpired:
        return "Slurm controller does not answer (scontrol ping timed out)", True
    if ping.returncode != 0 or "UP" not in ping.stdout:
        return "Slurm controller is down: run scripts/services/slurm.sh as root", False
    if not READY_STATES & set(states.stdout.split()):
        return f"no Slurm node ready (sinfo: {states.stdout.split() or states.stderr.strip()})", True
    return None, False


def slurm_available() -> bool:
    return slurm_unavailable() is None


def _epoch(stamp: str) -> float:
    # Slurm prints local time without a zone, e.g. 2026-11-30T10:41:51
    return datetime.fromisoformat(stamp).timestamp()


def _end(stamp: str) -> float | None:
    try:
        return _epoch(stamp)
    except ValueError:  # "N/A", "Unknown", or empty while running
        return None


def _jobcomp_path() -> Path | None:
    out = _run("scontrol", "show", "config").stdout
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "JobCompLoc" and value.strip().startswith("/"):
            return Path(value.strip())
    return None


def _from_squeue() -> dict[str, SlurmJob]:
    out = _run("squeue", "--states=all", "--noheader", "--format=%i|%T|%V|%e|%j|%k").stdout
    jobs = {}
    for line in out.splitlines():
        parts = line.split("|", 5)
        if len(parts) == 6:
            jid, state, submitted, ended, name, comment = (p.strip() for p in parts)
            jobs[jid] = SlurmJob(jid, name, state, _epoch(submitted), "" if comment == "(null)" else comment,
                                 _end(ended) if state in FINAL_STATES else None)
    return jobs


def _from_jobcomp() -> dict[str, SlurmJob]:
    path = _jobcomp_path()
    if path is None or not path.is_file():
        return {}
    jobs = {}
    for line in path.read_text(errors="replace").splitlines():
        fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if "JobId" in fields and "SubmitTime" in fields:
            jobs[fields["JobId"]] = SlurmJob(fields["JobId"], fields.get("Name", ""),
                                             fields.get("JobState", ""), _epoch(fields["SubmitTime"]),
                                             ended=_end(fields.get("EndTime", "")))
    return jobs


def jobs_seen_since(t0: float) -> list[SlurmJob]:
    """Every Slurm job submitted at or after t0 (epoch seconds), oldest first.

    squeue wins over the completion log for a job both know (it has the comment)."""
    jobs = _from_jobcomp()
    jobs.update(_from_squeue())
    return sorted((j for j in jobs.values() if j.submitted >= int(t0)), key=lambda j: (j.submitted, int(j.id.split("_")[0])))


def job_state(job_id: str) -> str:
    out = _run("squeue", "--states=all", "--noheader", "--format=%T", "--jobs", job_id).stdout.strip()
    if out:
        return out.splitlines()[0].strip()
    return _from_jobcomp().get(job_id, SlurmJob(job_id, "", "UNKNOWN", 0)).state


def wait_for_job(job_id: str, timeout: float = 120) -> str:
    """Poll until the job reaches a final state; return it (or the last state on timeout)."""
    deadline = time.monotonic() + timeout
    state = job_state(job_id)
    while state not in FINAL_STATES and time.monotonic() < deadline:
        time.sleep(0.5)
        state = job_state(job_id)
    return state
