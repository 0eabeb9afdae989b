"""The task row every benchmark loader produces, and the loader interface."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ..errors import UserError


class Task(BaseModel):
    """One benchmark task, normalised across formats."""

    id: str  # path- and wildcard-safe (sandbatch.ids.path_id)
    instance_id: str  # the benchmark's own id
    repo: str = ""
    base_commit: str | None = None
    problem_statement: str = ""
    patch: str = ""  # the gold patch
    test_patch: str = ""
    fail_to_pass: list[str] = Field(default_factory=list)
    pass_to_pass: list[str] = Field(default_factory=list)
    image: str | None = None
    workdir: str = "/testbed"
    repo_dir: str | None = None  # absolute path of bundled repository files, if any
    test_cmd: str | None = None
    log_parser: str = "pytest"
    extra: dict[str, Any] = Field(default_factory=dict)  # every other field of the row


def parse_list(value: Any, where: str) -> list[str]:
    """A list column that may arrive as a list or as a JSON-encoded string."""
    if isinstance(value, list):
        return [str(v) for v in value]
    if isinstance(value, str):
        try:
            parsed = json.loads(value) if value.strip() else []
        except json.JSONDecodeError:
            raise UserError(f"{where}: {value[:60]!r} is not a JSON list of test names") from None
        if isinstance(parsed, list):
            return [str(v) for v in parsed]
    raise UserError(f"{where}: expected a list of test names, got {type(value).__name__}")


def select(tasks: list[Task], limit: int | None, instance_ids: list[str], pattern: str | None,
           source: str) -> list[Task]:
    """Apply benchmark.instance_ids, benchmark.filter and benchmark.limit, in that order."""
    if instance_ids:
        known = {t.instance_id for t in tasks}
        missing = [i for i in instance_ids if i not in known]
        if missing:
            raise UserError(f"benchmark.instance_ids: {missing[0]!r} is not a task of {source}")
        wanted = set(instance_ids)
        tasks = [t for t in tasks if t.instance_id in wanted]
    if pattern:
        try:
            rx = re.compile(pattern)
        except re.error as exc:
            raise UserError(f"benchmark.filter: {pattern!r} is not a valid regular expression ({exc})") from None
        tasks = [t for t in tasks if rx.search(t.instance_id)]
    if limit is not None:
        tasks = tasks[:limit]
    return tasks


def check_unique(tasks: list[Task], source: str) -> None:
    seen: dict[str, str] = {}
    for t in tasks:
        if t.instance_id in seen.values():
            raise UserError(f"{source}: duplicate task id {t.instance_id!r}; every instance_id must be unique")
        if t.id in seen:
            raise UserError(f"{source}: task ids {seen[t.id]!r} and {t.instance_id!r} map to the same path {t.id!r}")
        seen[t.id] = t.instance_id


def resolve_path(path: str, base_dirs: list[Path]) -> Path:
    """A relative path is looked up in the working directory, then in each base dir."""
    p = Path(path)
    if p.is_absolute():
        return p
    for base in [Path.cwd(), *base_dirs]:
        if (base / p).exists():
            return (base / p).resolve()
    return (Path.cwd() / p).resolve()
