"""`sandbatch stop`: end a run's Snakemake within a bounded time, unlock, delete its sandboxes.

Ctrl-C semantics, bounded: SIGINT goes to Snakemake and to every process of its job tree
(Snakemake alone only stops scheduling and then waits for its jobs; each step cancels on
SIGINT and deletes the sandbox it holds). If Snakemake ignores SIGINT (started with
`nohup` or `&` from a script), it is frozen with SIGSTOP instead, so it cannot retry the
interrupted jobs. Whatever still lives after `grace` seconds is frozen and SIGKILLed,
whole tree (SIGTERM is never used: it can deadlock Snakemake 9 while it selects jobs).
Then the locks are removed (`snakemake --unlock`) and the run's sandboxes are deleted by
label, so a rerun of the same command resumes the run.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from .owners import Owner, locked, owners, recover


@dataclass
class StopReport:
    pids: list[int] = field(default_factory=list)
    method: str = "none"  # none | sigint | sigkill
    seconds: float = 0.0
    killed: int = 0  # processes that needed SIGKILL
    locks_removed: bool = False
    sandboxes_deleted: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _tree(pids: list[int]):
    """psutil processes of `pids` and all their descendants (including new sessions)."""
    import psutil

    procs = {}
    for pid in pids:
        try:
            p = psutil.Process(pid)
            procs[p.pid] = p
            for c in p.children(recursive=True):
                procs[c.pid] = c
        except psutil.NoSuchProcess:
            continue
    return list(procs.values())


def _signal(procs, sig) -> None:
    import psutil

    for p in procs:
        try:
            p.send_signal(sig)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


def _ignores_sigint(pid: int) -> bool:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    except (OSError, ValueError):
        pass
    return False


def kill_tree(pids: list[int], timeout: float = 10.0) -> int:
    """Freeze then SIGKILL `pids` and every descendant; return how many were killed.

    Freezing first (top-down, re-scanning until nothing new appears) means no process can
    fork a child that escapes the kill by being re-parented.
    """
    import psutil

    frozen: dict[int, psutil.Process] = {}
    for _ in range(20):
        new = [p for p in _tree(pids + list(frozen)) if p.pid not in frozen]
        if not new:
            break
        _signal(new, signal.SIGSTOP)
        frozen.update((p.pid, p) for p in new)
    procs = list(frozen.values())
    _signal(procs, signal.SIGKILL)
    if not _wait_gone([p.pid for p in procs], timeout):
        raise RuntimeError(f"processes survived SIGKILL: {[p.pid for p in procs if _running(p.pid)]}")
    return len(procs)


def _running(pid: int) -> bool:
    """Exists and is not a zombie (a dead child its parent has not waited for yet)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if not any(_running(p) for p in pids):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def find(workdir: Path, run: str) -> list[Owner]:
    """This host's Snakemake processes of `run` in `workdir` (unknown-run ones included)."""
    return [o for o in owners(workdir) if o.local and o.run in (run, None)]


def stop(run: str, results_dir: str = "results", workdir: str | os.PathLike = ".", grace: float = 20.0,
         reap: bool = True) -> StopReport:
    wd = Path(workdir).resolve()
    rep = StopReport()
    t0 = time.monotonic()
    found = find(wd, run)
    foreign = [o for o in owners(wd, prune=False) if not o.local and o.run in (run, None)]
    if foreign:
        rep.notes.append(f"a Snakemake of this run may be running on host {foreign[0].host} "
                         f"(pid {foreign[0].pid}); stop it there")
    rep.pids = sorted(o.pid for o in found)
    if found:
        mains = rep.pids
        jobs = [p for p in _tree(mains) if p.pid not in mains]
        if any(_ignores_sigint(p) for p in mains):
            # it would retry the jobs we interrupt: freeze it while the jobs clean up, then kill it
            for pid in mains:
                os.kill(pid, signal.SIGSTOP)
            rep.notes.append("Snakemake ignores SIGINT (started in the background?): froze it while its jobs stopped")
            _signal(jobs, signal.SIGINT)
            _wait_gone([p.pid for p in jobs], grace)
            rep.method = "sigint-jobs"
            rep.killed = kill_tree(mains)
        else:
            _signal(_tree(mains), signal.SIGINT)
            if _wait_gone(mains, grace):
                rep.method = "sigint"
            else:
                rep.method = "sigkill"
                rep.killed = kill_tree(mains)
        # a job that ignored the signal and outlived Snakemake (re-parented, so not in the tree)
        rest = [p.pid for p in jobs if p.is_running() and _running(p.pid)]
        if rest:
            rep.killed += kill_tree(rest)
        _wait_gone(mains, 10.0)
    if not [o for o in owners(wd) if o.local]:
        rep.locks_removed = locked(wd)
        rep.notes += [n.removeprefix("sandbatch: ") for n in recover(wd) if "locks" not in n]
    elif found:
        rep.notes.append("another Snakemake works in this directory: its locks were left alone")
    if reap:
        from ..core.config import run_config
        from .rerun import lost_note, reap_and_forget

        rep.sandboxes_deleted, lost = reap_and_forget(run_config(run, results_dir, wd), wd)
        if lost:
            rep.notes.append(lost_note(lost).removeprefix("sandbatch: "))
    rep.seconds = round(time.monotonic() - t0, 2)
    return rep

