"""The identity of one run instance: which sandboxes on a shared engine or service are ours.

Run names repeat (`default`, the same `try2` in two checkouts of one user), so the labels
`run` and `owner` alone would let one working directory reap another's live sandboxes.
Every run instance therefore gets a random id, made once and kept at
`results/<run>/_instance.json` so a resumed run keeps it (and finds the sandboxes of its
own killed jobs). Every sandbox carries it as the label `instance`, and everything that
lists, reaps or stops sandboxes selects by it.

The file also names the working directory it was made in: a results directory copied or
moved to another working directory gets a new id there (from `claim`), so the copy never
touches the original's sandboxes.
"""

from __future__ import annotations

import getpass
import json
import os
import secrets
import socket
import time
from pathlib import Path

from .ids import label_value

INSTANCE_FILE = "_instance.json"


def instance_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / INSTANCE_FILE


def read_instance(run_dir: str | os.PathLike) -> str | None:
    """The run's id, or None when no run has started in `run_dir` (nothing of it can exist)."""
    try:
        return str(json.loads(instance_path(run_dir).read_text(encoding="utf-8"))["id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _recorded_workdir(run_dir: Path) -> str | None:
    try:
        return json.loads(instance_path(run_dir).read_text(encoding="utf-8")).get("workdir")
    except (OSError, ValueError, AttributeError):
        return None


def _write(run_dir: Path, *, replace: bool) -> None:
    """Write a new id; with replace=False only if none exists (first writer wins, atomically)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    rec = {"id": secrets.token_hex(8), "workdir": os.path.realpath("."), "host": socket.gethostname(),
           "created_at": time.time()}
    tmp = run_dir / f".{INSTANCE_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    try:
        if replace:
            tmp.replace(instance_path(run_dir))
        else:
            try:
                os.link(tmp, instance_path(run_dir))
            except FileExistsError:
                pass
    finally:
        tmp.unlink(missing_ok=True)


def ensure_instance(run_dir: str | os.PathLike) -> str:
    """The run's id, made now if it has none (steps started by hand; parallel callers agree)."""
    found = read_instance(run_dir)
    if found is None:
        _write(Path(run_dir), replace=False)
        found = read_instance(run_dir)
    assert found is not None
    return found


def claim(run_dir: str | os.PathLike) -> tuple[str, str | None]:
    """At the start of a real run (the working directory is the run's): its id, and a note
    when the results came from another working directory and got an id of their own."""
    rd = Path(run_dir)
    recorded = _recorded_workdir(rd)
    if read_instance(rd) is not None and recorded not in (None, os.path.realpath(".")):
        _write(rd, replace=True)
        return read_instance(rd), (f"sandbatch: {rd} was made in {recorded}; this working directory gets a "
                                   f"sandbox identity of its own (sandboxes left there are not touched)")
    return ensure_instance(rd), None


def run_labels(cfg, instance: str | None = None) -> dict[str, str]:
    """The labels every sandbox of this run instance carries (providers may prefix the keys).

    `instance` (sandbatch.instance) is what selects them: `run` and `owner` repeat across
    working directories. Steps make the id if the run has none yet (started by hand).
    """
    return {"run": label_value(cfg.run), "owner": label_value(cfg.sandbox.owner or getpass.getuser()),
            "instance": instance or ensure_instance(cfg.run_dir)}


def selector(cfg) -> dict[str, str] | None:
    """The labels that select exactly this run instance's sandboxes; None when it never
    started here (it has no id, so no sandbox can be its)."""
    instance = read_instance(cfg.run_dir)
    return None if instance is None else {"run": label_value(cfg.run), "instance": instance}
