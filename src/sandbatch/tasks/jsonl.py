"""JSON-lines task files: every row with its line number and byte offset, or one row by offset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from ..errors import UserError


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
        raise UserError(f"benchmark.tasks: task file {str(path)!r} not found; point it at a JSONL file of task rows")
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
