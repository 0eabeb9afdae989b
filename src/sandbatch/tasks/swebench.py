"""Classic SWE-bench rows (JSONL), and the bundled smoke benchmark in the same format."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import UserError
from ..ids import path_id
from .base import Task, parse_list


def image_for(instance_id: str) -> str:
    """The public per-instance evaluation image name."""
    return f"swebench/sweb.eval.x86_64.{instance_id.replace('__', '_1776_')}:latest".lower()


def load_jsonl(path: Path) -> list[Task]:
    import jsonschema

    from ..config import load_schema

    if not path.is_file():
        raise UserError(f"benchmark.tasks: task file {str(path)!r} not found; point it at a JSONL file of task rows")
    validator = jsonschema.Draft202012Validator(load_schema("tasks/swebench.schema.yaml"))
    tasks: list[Task] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(row, dict):
                raise UserError(f"{where}: a task row must be a JSON object")
            err = next(iter(sorted(validator.iter_errors(row), key=lambda e: e.path)), None)
            if err is not None:
                field = ".".join(map(str, err.absolute_path)) or (
                    err.message.split("'")[1] if err.validator == "required" else "<row>")
                raise UserError(f"{where}: field {field}: {err.message}")
            tasks.append(_task(row, path, where))
    return tasks


def _task(row: dict, path: Path, where: str) -> Task:
    known = {"instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch",
             "FAIL_TO_PASS", "PASS_TO_PASS", "image", "workdir", "repo_dir", "test_cmd", "log_parser"}
    iid = row["instance_id"]
    repo_dir = row.get("repo_dir")
    if repo_dir:
        repo_path = (path.parent / repo_dir).resolve()
        if not repo_path.is_dir():
            raise UserError(f"{where}: field repo_dir: {repo_dir!r} is not a directory next to {path.name}")
        repo_dir = str(repo_path)
    return Task(
        id=path_id(iid),
        instance_id=iid,
        repo=row.get("repo") or "",
        base_commit=row.get("base_commit"),
        problem_statement=row["problem_statement"],
        patch=row["patch"],
        test_patch=row["test_patch"],
        fail_to_pass=parse_list(row["FAIL_TO_PASS"], f"{where}: field FAIL_TO_PASS"),
        pass_to_pass=parse_list(row["PASS_TO_PASS"], f"{where}: field PASS_TO_PASS"),
        image=row.get("image") or (None if repo_dir else image_for(iid)),
        workdir=row.get("workdir") or "/testbed",
        repo_dir=repo_dir,
        test_cmd=row.get("test_cmd"),
        log_parser=row.get("log_parser") or "pytest",
        extra={k: v for k, v in row.items() if k not in known},
    )


def find_task(path: Path, task_id: str) -> Task | None:
    """The row whose path id is `task_id`, parsing only the lines that mention it.

    For step jobs, which each need one task: no schema validation (the Snakefile validated
    the file when it built the DAG) and no parsing of the other rows. None when no line
    mentions the id literally (ids shortened with a hash): then load the whole file.
    """
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if task_id not in line:
                continue
            row = json.loads(line)
            if isinstance(row, dict) and path_id(str(row.get("instance_id", ""))) == task_id:
                return _task(row, path, f"{path}:{lineno}")
    return None
