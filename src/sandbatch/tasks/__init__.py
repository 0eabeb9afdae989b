"""Benchmarks: task loading and selection. Adding a format = one module + one registry line."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .. import REPO_ROOT
from ..errors import UserError
from .base import Task, check_unique, resolve_path, select

if TYPE_CHECKING:
    from ..config import BenchmarkConfig


def _swebench_loader(path: Path) -> list[Task]:
    from .swebench import load_jsonl

    return load_jsonl(path)


def _swebench_finder(path: Path, task_id: str) -> Task | None:
    from .swebench import find_task

    return find_task(path, task_id)


# benchmark.kind -> loader(path) -> tasks
LOADERS: dict[str, Callable[[Path], list[Task]]] = {
    "smoke": _swebench_loader,
    "swebench": _swebench_loader,
}
# optional, per kind: finder(path, task_id) -> the one task a step job needs, cheaply (or None)
FINDERS: dict[str, Callable[[Path, str], Task | None]] = {
    "smoke": _swebench_finder,
    "swebench": _swebench_finder,
}


def tasks_path(bench: "BenchmarkConfig") -> Path:
    return resolve_path(bench.tasks, [REPO_ROOT])


@functools.cache
def _load_cached(kind: str, path: Path, mtime_ns: int) -> tuple[Task, ...]:
    tasks = LOADERS[kind](path)
    check_unique(tasks, str(path))
    return tuple(tasks)


def load_tasks(bench: "BenchmarkConfig") -> list[Task]:
    """The selected tasks of the benchmark, validated; UserError names file, line and field."""
    if bench.kind not in LOADERS:
        raise UserError(f"benchmark.kind: {bench.kind!r} is not known; choose one of: {', '.join(LOADERS)}")
    path = tasks_path(bench)
    if not path.exists():
        raise UserError(f"benchmark.tasks: {bench.tasks!r} not found; point it at the benchmark's task file")
    tasks = list(_load_cached(bench.kind, path, path.stat().st_mtime_ns))
    return select(tasks, bench.limit, bench.instance_ids, bench.filter, str(path))


def get_task(bench: "BenchmarkConfig", task_id: str) -> Task:
    """One task for a step job: through the kind's finder when it has one (a step must not
    pay for validating and parsing a whole benchmark file), else from the full table."""
    if bench.kind in FINDERS:
        task = FINDERS[bench.kind](tasks_path(bench), task_id)
        if task is not None:
            return task
    for task in load_tasks(bench):
        if task.id == task_id:
            return task
    raise UserError(f"task {task_id!r} is not in {bench.tasks}")


__all__ = ["Task", "LOADERS", "load_tasks", "get_task", "tasks_path"]
