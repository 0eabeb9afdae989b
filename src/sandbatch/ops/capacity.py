"""How many rollouts this host's limits hold at once, so a run asked for more queues.

A local run's Snakemake keeps about 5 descriptors per running job (up to two jobs per
rollout: convert beside patch), and every running rollout has a few processes (the job's
shell, the step, the sandbox's commands) and their threads: a pids cgroup and `ulimit -u`
count every thread. Snakemake's own threads are many and not tied to the rollouts: its
scheduler starts a one-second timer thread on every pass (snakemake/snakemake#3804), and
once it cannot start one the whole run stops. A `concurrency` beyond the open-files limit
or the process limit would fail rollouts with EMFILE or EAGAIN, or stop the run; instead the run's
`sandboxes` resource is lowered to what the limits hold, and the rest of the rollouts
wait for a slot (one note says so). The open-files soft limit is first raised to the hard
one, which is all most hosts need. Memory is watched where steps start (the step server
waits to fork while memory is short: sandbatch.steps.forkserver).
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

FDS_PER_ROLLOUT = 12  # Snakemake's own, measured ~5 per running job; two jobs per rollout, and margin
FDS_BASE = 128  # Snakemake's own at rest, the step server's, the aggregate's
# tasks = threads. benchmarks/utilisation.py measured Snakemake's own at up to 184 on 2 cores,
# and per rollout besides them 5.8 (oracle), 10.2 (mini-swe-agent in host mode), 12.0 (the
# docker provider: its CLI's threads while a command runs)
TASKS_BASE = 320  # Snakemake's own, the step server's, the aggregate's
TASKS_PER_ROLLOUT = 16


def raise_open_files() -> int:
    """Raise this process's (and its future children's) open-files soft limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError):
            pass
    return soft


def task_headroom() -> tuple[int, str] | None:
    """(tasks, processes or threads, this user may still start, the limit's name), the tightest
    limit; None: none."""
    found: list[tuple[int, str]] = []
    soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if os.geteuid() != 0 and soft != resource.RLIM_INFINITY:  # root is not held to it
        mine = sum(_tasks(p) for p in Path("/proc").iterdir() if p.name.isdigit() and _owner(p) == os.getuid())
        found.append((soft - mine, f"process limit (ulimit -u) {soft}"))
    cgroup = _pids_cgroup()
    if cgroup is not None:
        try:
            limit = (cgroup / "pids.max").read_text().strip()
            if limit != "max":
                used = int((cgroup / "pids.current").read_text())
                found.append((int(limit) - used, f"pids cgroup limit {limit}"))
        except (OSError, ValueError):
            pass
    return min(found) if found else None


def _tasks(path: Path) -> int:
    try:
        return len(os.listdir(path / "task"))
    except OSError:
        return 0


def _owner(path: Path) -> int | None:
    try:
        return path.stat().st_uid
    except OSError:
        return None


def _pids_cgroup() -> Path | None:
    """This process's pids cgroup directory (cgroup v1 `pids` controller, or v2)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            return Path("/sys/fs/cgroup/pids") / path.lstrip("/")
    for line in lines:
        if line.startswith("0::") and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            return Path("/sys/fs/cgroup") / line[3:].lstrip("/")
    return None


def rollouts_at_once(wanted: int) -> tuple[int, str | None]:
    """(how many of `wanted` rollouts this host's limits hold at once, why fewer, or None)."""
    files = raise_open_files()
    best, why = wanted, None
    if files != resource.RLIM_INFINITY:
        by_files = max(1, (files - FDS_BASE) // FDS_PER_ROLLOUT)
        if by_files < best:
            best, why = by_files, f"open files limit (ulimit -n) {files}"
    headroom = task_headroom()
    if headroom is not None:
        by_tasks = max(1, (headroom[0] - TASKS_BASE) // TASKS_PER_ROLLOUT)
        if by_tasks < best:
            best, why = by_tasks, headroom[1]
    return best, why
