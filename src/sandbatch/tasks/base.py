"""What the benchmark loaders share: list columns, Gym prompts, selection, schema errors.
The task rows they produce are contracts.tasks's."""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path
from typing import Any, Iterable, Protocol, TypeVar

from ..core.config import load_schema
from ..core.errors import UserError


def parse_list(value: Any, where: str) -> list[str]:
    """A list column: a list, a JSON-encoded list, or a Python-literal list ("['a', 'b']").

    Python literals are read with ast.literal_eval on the string (it evaluates literals
    only, never code); anything but a list/tuple of strings is an error.
    """
    if value is None:
        return []
    if isinstance(value, list):
        if all(isinstance(v, str) for v in value):
            return list(value)
        raise UserError(f"{where}: every entry must be a string (a test name or file)")
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return []
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            try:
                parsed = ast.literal_eval(text)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                raise UserError(f"{where}: {value[:60]!r} is neither a JSON nor a Python list of strings") from None
        if isinstance(parsed, (list, tuple)) and all(isinstance(v, str) for v in parsed):
            return list(parsed)
        raise UserError(f"{where}: {value[:60]!r} is not a list of strings")
    raise UserError(f"{where}: expected a list of strings, got {type(value).__name__}")


def _text(content: Any) -> str:
    """A Responses message's content as text: a string, or its parts' texts joined."""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def gym_prompt(params: Any) -> str | None:
    """The prompt of a NeMo Gym row (its `responses_create_params`), taken as NeMo Gym's
    OpenCode agent takes it (responses_api_agents/opencode_agent: `_extract_instruction`):
    the text of the last user message, after the text of a leading system message and a
    blank line; a string `input` is the user message. None when there is no user message
    (Gym's SWE-bench rows carry `input: []`: their agents prompt with problem_statement)."""
    items = params.get("input") if isinstance(params, dict) else None
    if isinstance(items, str):
        return items or None
    if not isinstance(items, list):
        return None
    messages = [m for m in items if isinstance(m, dict)]
    system = _text(messages[0].get("content")) if messages and messages[0].get("role") == "system" else ""
    user = next((_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
    if not user:
        return None
    return f"{system}\n\n{user}" if system else user


class HasInstanceId(Protocol):
    instance_id: str


T = TypeVar("T", bound=HasInstanceId)


def select(tasks: list[T], limit: int | None, instance_ids: list[str], pattern: str | None,
           source: str) -> list[T]:
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


def check_unique(tasks: Iterable[Any], source: str) -> None:
    seen: dict[str, str] = {}
    ids: set[str] = set()
    for t in tasks:
        if t.instance_id in ids:
            raise UserError(f"{source}: duplicate task id {t.instance_id!r}; every instance_id must be unique")
        ids.add(t.instance_id)
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


@functools.cache
def validator(schema: str):
    """The JSON Schema validator of a task schema under schemas/ (built once per process)."""
    import jsonschema

    return jsonschema.Draft202012Validator(load_schema(schema))


def schema_error(where: str, validator, row: Any) -> None:
    """Raise the first JSON Schema error of `row` as one line naming the field."""
    errors = sorted(validator.iter_errors(row), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if not errors:
        return
    err = errors[0]
    if err.validator == "required":
        field = err.message.split("'")[1] if "'" in err.message else "<row>"
        raise UserError(f"{where}: field {field}: is required but missing")
    field = ".".join(map(str, err.absolute_path)) or "<row>"
    raise UserError(f"{where}: field {field}: {err.message[:200]}")
