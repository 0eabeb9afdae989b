"""Things built once on this machine and shared by the tests that need them: by every xdist
worker of a run (a session fixture runs once per worker) and by runs beside it.

`built_once(name)` holds a lock file while the caller checks for the thing and builds it when
missing: the first worker builds, the others wait, then find it built. `machine_dir(name)` is
where such a thing lives when it is a directory (kept across runs, like Docker's images)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

ROOT = Path(tempfile.gettempdir()) / "sandbatch-tests"


def machine_dir(name: str) -> Path:
    path = ROOT / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def built_once(name: str, bound: float) -> Iterator[None]:
    """Hold the lock `name` while building; `bound`: the seconds the build itself may take, as long
    as another worker's build may keep us waiting."""
    lock = FileLock(machine_dir(f"{name}.lock"))
    try:
        lock.acquire(timeout=bound)
    except Timeout:
        raise AssertionError(f"{name}: another test process held {lock.lock_file} for over {bound:.0f} s "
                             "(a build that long is stuck)") from None
    try:
        yield
    finally:
        lock.release()
