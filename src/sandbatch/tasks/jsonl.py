"""JSON-lines task files: every row with its line number and byte offset, or one row by offset;
and the scan/read pair a JSONL loader exposes, built from its schema and its row -> Task function."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator

from ..contracts.tasks import Task
from ..core.errors import UserError
from .base import schema_error, validator

# (row, task file, "<file>:<line>" for messages) -> Task; the row has passed the schema
RowToTask = Callable[[dict, Path, str], Task]


def _row(raw: bytes, where: str) -> dict[str, Any]:
    try:
        row = json.loads(raw)
    except UnicodeDecodeError:
        raise UserError(f"{where}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(row, dict):
        raise UserError(f"{where}: a task row must be a JSON object, not {type(row).__name__}")
    return row


def iter_rows(path: Path) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """(line number, byte offset, row) for every non-blank line."""
    if not path.is_file():
        raise UserError(f"task file {str(path)!r} not found; point it at a JSONL file of task rows", "benchmark.tasks")
    offset = 0
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            start, offset = offset, offset + len(raw)
            if raw.strip():
                yield lineno, start, _row(raw, f"{path}:{lineno}")


def read_row(path: Path, offset: int, lineno: int) -> dict[str, Any]:
    """The row that starts at `offset` (from an index built by iter_rows)."""
    with open(path, "rb") as fh:
        fh.seek(offset)
        return _row(fh.readline(), f"{path}:{lineno}")


def _task(row: dict, path: Path, where: str, schema: str, to_task: RowToTask) -> Task:
    schema_error(where, validator(schema), row)
    return to_task(row, path, where)


def scan_tasks(path: Path, schema: str, to_task: RowToTask) -> list[tuple[Task, Any]]:
    """Every row, validated against `schema`, with its locator [byte offset, line] for `task_at`."""
    return [(_task(row, path, f"{path}:{lineno}", schema, to_task), [offset, lineno])
            for lineno, offset, row in iter_rows(path)]


def task_at(path: Path, locator: Any, schema: str, to_task: RowToTask) -> Task:
    """The one row at `locator` (from `scan_tasks`). Not validated again: the index that
    holds the locator was built from this very file (same path, size and mtime), so the row
    passed the schema then, and a step job does not pay for importing jsonschema."""
    offset, lineno = locator
    return to_task(read_row(path, offset, lineno), path, f"{path}:{lineno}")


def resolve_repo_dir(row: dict, path: Path, where: str) -> str | None:
    """A row's `repo_dir` (a local repository for the smoke tasks) resolved next to the task file."""
    rel = row.get("repo_dir")
    if not rel:
        return rel
    resolved = (path.parent / rel).resolve()
    if not resolved.is_dir():
        raise UserError(f"{where}: field repo_dir: {rel!r} is not a directory next to {path.name}")
    return str(resolved)
