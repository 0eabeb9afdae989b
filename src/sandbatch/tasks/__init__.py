"""The benchmarks' task rows: one loader per family (a registry), per-task settings, fetch-tasks,
selection. May import core and contracts.

Every spawned Snakemake job re-reads the task table, so the Snakefile reads only a small
index (id, instance_id, repo and where the row lives), cached under
`.snakemake/sandbatch/` and keyed by the task file's path, size and mtime (for a task
directory: of every file the loader reads). A step reads its one row by byte offset.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..contracts.tasks import Task
from ..core import resources
from ..core.errors import UserError
from ..core.util import write_atomic
from .base import check_unique, resolve_path, select

if TYPE_CHECKING:
    from ..core.config import BenchmarkConfig

# benchmark.kind -> module with scan(path) -> [(Task, locator)] and read(path, locator) -> Task
BENCHMARKS: dict[str, str] = {
    "smoke": "sandbatch.tasks.swebench",
    "swebench": "sandbatch.tasks.swebench",
    "swebench_multilingual": "sandbatch.tasks.swebench",
    "swebench_pro": "sandbatch.tasks.swebench_pro",
    "terminal_bench": "sandbatch.tasks.terminal_bench",
}

INDEX_VERSION = 1  # bump when a loader changes what it accepts or produces
INDEX_DIR = Path(".snakemake") / "sandbatch" / "index"


class TaskRef(NamedTuple):
    """What the workflow needs of a task at parse time."""

    id: str
    instance_id: str
    repo: str
    locator: Any  # where `read` finds the row (byte offset + line, or a directory name)


def _module(kind: str):
    if kind not in BENCHMARKS:
        raise UserError(f"benchmark.kind: {kind!r} is not known; choose one of: {', '.join(BENCHMARKS)}")
    return importlib.import_module(BENCHMARKS[kind])


def tasks_path(bench: "BenchmarkConfig") -> Path:
    return resolve_path(bench.tasks, [resources.root()])


def _fingerprint(kind: str, path: Path) -> list[Any]:
    module = _module(kind)
    schema = resources.schema(module.SCHEMA)
    key: list[Any] = [INDEX_VERSION, kind, str(path), schema.stat().st_mtime_ns]
    if hasattr(module, "fingerprint"):
        return key + module.fingerprint(path)
    st = path.stat()
    return key + [st.st_mtime_ns, st.st_size]


@functools.cache
def _index(kind: str, path: Path, fingerprint: str) -> tuple[TaskRef, ...]:
    cache = INDEX_DIR / f"{kind}-{hashlib.sha256(str(path).encode()).hexdigest()[:16]}.json"
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
        if data.get("fingerprint") == fingerprint:
            return tuple(TaskRef(*r) for r in data["tasks"])
    except (OSError, ValueError, TypeError, KeyError):
        pass
    refs = tuple(TaskRef(t.id, t.instance_id, t.repo, loc) for t, loc in _module(kind).scan(path))
    check_unique(refs, str(path))
    try:
        write_atomic(cache, json.dumps({"fingerprint": fingerprint, "tasks": [list(r) for r in refs]}))
    except OSError:
        pass  # a read-only working directory only costs the cache
    return refs


def _checked_path(bench: "BenchmarkConfig") -> Path:
    _module(bench.kind)
    path = tasks_path(bench)
    if not path.exists():
        raise UserError(f"{bench.tasks!r} not found; write it with `sandbatch fetch-tasks {bench.kind} --out "
                        f"{shlex.quote(str(bench.tasks))}`, or point benchmark.tasks at the benchmark's task file",
                        "benchmark.tasks")
    return path


def index(bench: "BenchmarkConfig") -> list[TaskRef]:
    """Every task of the benchmark file (validated on the first read, then cached)."""
    path = _checked_path(bench)
    fp = json.dumps(_fingerprint(bench.kind, path))
    return list(_index(bench.kind, path, fp))


def select_tasks(bench: "BenchmarkConfig") -> list[TaskRef]:
    """The selected tasks, cheaply: what the Snakefile and the aggregate iterate over."""
    return select(index(bench), bench.limit, bench.instance_ids, bench.filter, str(tasks_path(bench)))


def read_task(bench: "BenchmarkConfig", ref: TaskRef) -> Task:
    return _module(bench.kind).read(tasks_path(bench), ref.locator)


def load_tasks(bench: "BenchmarkConfig") -> list[Task]:
    """The selected tasks in full; UserError names file, line and field."""
    return [read_task(bench, ref) for ref in select_tasks(bench)]


def get_task(bench: "BenchmarkConfig", task_id: str) -> Task:
    for ref in index(bench):
        if ref.id == task_id:
            return read_task(bench, ref)
    raise UserError(f"task {task_id!r} is not in {bench.tasks}")


__all__ = ["Task", "TaskRef", "BENCHMARKS", "index", "select_tasks", "load_tasks", "read_task", "get_task",
           "tasks_path"]
