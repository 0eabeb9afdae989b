"""Which Snakemake processes work in a directory, and which of its locks are stale.

Snakemake's lock files (`.snakemake/locks/`) name files, not processes: after a SIGKILL
(OOM killer, lost node, `kill -9`) they stay and every later run fails until someone runs
`snakemake --unlock`. sandbatch tells live locks from stale ones itself:

- a real run writes an owner record `.sandbatch/owners/<host>-<pid>.json` from `onstart`
  (which Snakemake calls after it has taken its locks, only in real runs) and removes it
  when it ends (`onsuccess` / `onerror`); a SIGKILLed run leaves its record behind;
- a Snakemake process of this host is alive when its pid exists with the recorded start
  time; besides the records, the process table is scanned for `snakemake` processes whose
  working directory is this one (that covers the seconds between taking the locks and
  `onstart`, and runs started without sandbatch);
- when a run that executes jobs builds its DAG (sandbatch.ops.workflow.recover_before_run; never
  a dry run), if no Snakemake but this one works here and no record names another host,
  `recover` removes the locks and
  the outputs of interrupted jobs (see there). A record from another host (shared
  filesystem) keeps everything: this host cannot see that process, and the message says
  to run `snakemake --unlock` once it is known to be gone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import time
from base64 import urlsafe_b64decode
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OWNERS_DIR = Path(".sandbatch") / "owners"
LOCKS_DIR = Path(".snakemake") / "locks"
INCOMPLETE_DIR = Path(".snakemake") / "incomplete"


@dataclass(frozen=True)
class Owner:
    pid: int
    host: str
    run: str | None  # None: found in the process table, run unknown
    create_time: float | None = None
    record: Path | None = None

    @property
    def local(self) -> bool:
        return self.host == socket.gethostname()


def _create_time(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def register(run: str, workdir: str | os.PathLike = ".") -> Path:
    """Record this process as the Snakemake that runs `run` in `workdir` (called from onstart)."""
    pid = os.getpid()
    host = socket.gethostname()
    path = Path(workdir) / OWNERS_DIR / f"{host}-{pid}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = {"pid": pid, "host": host, "create_time": _create_time(pid), "run": run,
           "workdir": str(Path(workdir).resolve()), "argv": sys.argv, "started_at": time.time()}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec))
    tmp.replace(path)
    return path


def unregister(workdir: str | os.PathLike = ".") -> None:
    """Remove this process's owner record (called from onsuccess / onerror)."""
    (Path(workdir) / OWNERS_DIR / f"{socket.gethostname()}-{os.getpid()}.json").unlink(missing_ok=True)


def _read_records(workdir: Path) -> list[tuple[Path, dict[str, Any]]]:
    out = []
    d = workdir / OWNERS_DIR
    if not d.is_dir():
        return out
    for path in sorted(d.glob("*.json")):
        try:
            out.append((path, json.loads(path.read_text())))
        except (OSError, ValueError):
            continue
    return out


def _alive(pid: int, create_time: float | None) -> bool:
    """The pid runs (not a zombie) and, when known, started when the record says (pids are reused)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return create_time is None or abs(proc.create_time() - create_time) < 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


_PYTHON = re.compile(r"python[0-9.]*$")
_VALUE_OPTIONS = {"-X", "-W", "-Q"}  # Python options that take the next argument


def is_snakemake(cmdline: list[str]) -> bool:
    """The Snakemake process itself, by what it runs: Python running the `snakemake` entry
    script (what `snakemake ...` becomes) or `python -m snakemake`. A wrapper that merely names
    snakemake among its arguments (`timeout 600 snakemake`, `srun snakemake`) is not one: it
    forks the real Snakemake, and counting it made a resumed run under a wrapper see its own
    wrapper as a live run. (`nohup`, `nice`, `env`, `stdbuf` exec, so they become Python.)"""
    if not cmdline:
        return False
    if os.path.basename(cmdline[0]) == "snakemake":
        return True
    if not _PYTHON.match(os.path.basename(cmdline[0])):
        return False
    i = 1
    while i < len(cmdline):
        arg = cmdline[i]
        if arg == "-m":
            return cmdline[i + 1:i + 2] == ["snakemake"]
        if arg == "-c":
            return False
        if arg.startswith("-"):
            i += 2 if arg in _VALUE_OPTIONS else 1
            continue
        return os.path.basename(arg) == "snakemake"
    return False


def scan(workdir: str | os.PathLike) -> list[int]:
    """Pids of this host's Snakemake processes whose working directory is `workdir`."""
    import psutil

    target = os.path.realpath(workdir)
    me = os.getpid()
    pids = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.pid == me or not is_snakemake(proc.info["cmdline"] or []):
                continue
            if os.path.realpath(proc.cwd()) == target:
                pids.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return pids


def owners(workdir: str | os.PathLike = ".", prune: bool = True) -> list[Owner]:
    """Snakemake processes working in `workdir` (this one excluded), live or on another host.

    Records of this host whose process is gone are deleted when `prune` is set.
    """
    wd = Path(workdir)
    host, me = socket.gethostname(), os.getpid()
    found: dict[int, Owner] = {}
    foreign: list[Owner] = []
    for path, rec in _read_records(wd):
        pid = int(rec.get("pid", -1))
        if rec.get("host") != host:
            foreign.append(Owner(pid, rec.get("host", "?"), rec.get("run"), rec.get("create_time"), path))
        elif pid != me and _alive(pid, rec.get("create_time")):
            found[pid] = Owner(pid, host, rec.get("run"), rec.get("create_time"), path)
        elif pid != me and prune:
            path.unlink(missing_ok=True)
    for pid in scan(wd):
        found.setdefault(pid, Owner(pid, host, None, _create_time(pid)))
    return list(found.values()) + foreign


def locked(workdir: str | os.PathLike = ".") -> bool:
    d = Path(workdir) / LOCKS_DIR
    return d.is_dir() and any(d.iterdir())


def remove_locks(workdir: str | os.PathLike = ".") -> bool:
    """What `snakemake --unlock` does; True if there was something to remove."""
    had = locked(workdir)
    # the files only: Snakemake made the directory when it started and writes its locks there
    for lock in (Path(workdir) / LOCKS_DIR).glob("*"):
        if lock.is_dir():
            shutil.rmtree(lock, ignore_errors=True)
        else:
            lock.unlink(missing_ok=True)
    return had


def incomplete_markers(workdir: str | os.PathLike = ".") -> list[tuple[Path, str]]:
    """(marker file, output path as Snakemake names it) of every job started and not finished."""
    root = Path(workdir) / INCOMPLETE_DIR
    out: list[tuple[Path, str]] = []
    if not root.is_dir():
        return out
    for dirpath, _, files in os.walk(root):
        # long keys are split into '@'-prefixed directory parts (snakemake.persistence.file)
        prefix = "".join(p[1:] for p in Path(dirpath).relative_to(root).parts)
        for name in files:
            if name == "migration_underway":
                continue
            try:
                out.append((Path(dirpath) / name, urlsafe_b64decode(prefix + name).decode()))
            except ValueError:
                continue
    return out


def recover(workdir: str | os.PathLike = ".") -> list[str]:
    """Undo what a killed or stopped run left behind, unless a Snakemake still works here.

    Removes stale locks, and deletes the outputs of jobs that never finished (named by
    Snakemake's incomplete markers) with their markers, so the next run redoes exactly
    those jobs as missing outputs. (Snakemake's own `--rerun-incomplete` forces such a job
    but, in 9.27, then skips everything downstream of it that reads it as `ancient()` and
    everything that depends on that: a resumed run would stop after one job.)
    Cheap when there is nothing to do (two directory listings): it runs at every real run.
    Returns one-line notes for the user.
    """
    wd = Path(workdir)
    locks, markers = locked(wd), incomplete_markers(wd)
    if not locks and not markers:
        return []
    others = owners(wd)
    foreign = [o for o in others if not o.local]
    if foreign:
        o = foreign[0]
        return [f"sandbatch: {LOCKS_DIR} may belong to a Snakemake on host {o.host} (pid {o.pid}); "
                f"if it is no longer running, run `snakemake --unlock` (or `sandbatch stop`) once"]
    if others:
        return []  # a live run holds them: Snakemake reports the lock as usual
    notes = []
    if locks:
        remove_locks(wd)
        notes.append(f"sandbatch: removed stale Snakemake locks in {wd.resolve() / LOCKS_DIR} "
                     f"(no Snakemake is running here)")
    removed = 0
    for marker, key in markers:
        out = wd / key
        if out.is_file() or out.is_symlink():
            out.unlink()
            removed += 1
        elif out.is_dir():
            shutil.rmtree(out, ignore_errors=True)
            removed += 1
        marker.unlink(missing_ok=True)
    if markers:
        notes.append(f"sandbatch: {len(markers)} output(s) of interrupted jobs will be redone "
                     f"({removed} partial file(s) removed)")
    return notes
