"""SWE-bench rows (JSONL): classic Verified / Multilingual rows, self-describing rows that
carry `image`, `eval_script`, `log_parser`, `eval_type` (the swebench 5.x dataset shape),
the bundled smoke benchmark (classic rows plus `repo_dir` and `test_cmd`), and NeMo Gym's
SWE rows (classic rows plus `responses_create_params`, whose prompt is used: gym_prompt)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..contracts.tasks import SweBenchTask
from ..core.errors import UserError
from ..core.ids import path_id
from .base import gym_prompt, parse_list
from .jsonl import resolve_repo_dir, scan_tasks, task_at

SCHEMA = "tasks/swebench.schema.yaml"
FAMILY = "swebench"  # the grader family of every task this loader makes
WORKDIR = "/testbed"
KNOWN = {"instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch", "FAIL_TO_PASS",
         "PASS_TO_PASS", "version", "image", "workdir", "repo_dir", "test_cmd", "log_parser", "eval_script",
         "eval_type", "allow_internet"}


def image_for(instance_id: str) -> str:
    """The public per-instance evaluation image name."""
    return f"swebench/sweb.eval.x86_64.{instance_id.replace('__', '_1776_')}:latest".lower()


def scan(path: Path) -> list[tuple[SweBenchTask, Any]]:
    """Every row, validated, with its locator (byte offset, line) for `read`."""
    return scan_tasks(path, SCHEMA, _task)


def read(path: Path, locator: Any) -> SweBenchTask:
    return task_at(path, locator, SCHEMA, _task)


def _task(row: dict, path: Path, where: str) -> SweBenchTask:
    iid = row["instance_id"]
    repo_dir = resolve_repo_dir(row, path, where)
    if row.get("eval_script") and not row.get("log_parser"):
        raise UserError(f"{where}: field log_parser: a row with eval_script must name its log parser")
    version = row.get("version")
    return SweBenchTask(
        id=path_id(iid),
        instance_id=iid,
        family=FAMILY,
        repo=row.get("repo") or "",
        base_commit=row.get("base_commit"),
        problem_statement=row["problem_statement"],
        prompt=gym_prompt(row.get("responses_create_params")) or row["problem_statement"],
        patch=row["patch"],
        test_patch=row["test_patch"],
        fail_to_pass=parse_list(row["FAIL_TO_PASS"], f"{where}: field FAIL_TO_PASS"),
        pass_to_pass=parse_list(row["PASS_TO_PASS"], f"{where}: field PASS_TO_PASS"),
        version=None if version is None else str(version),
        image=row.get("image") or (None if repo_dir else image_for(iid)),
        workdir=row.get("workdir") or WORKDIR,
        repo_dir=repo_dir,
        test_cmd=row.get("test_cmd"),
        allow_internet=row.get("allow_internet"),
        log_parser=row.get("log_parser"),
        eval_script=row.get("eval_script"),
        eval_type=row.get("eval_type"),
        extra={k: v for k, v in row.items() if k not in KNOWN},
    )

