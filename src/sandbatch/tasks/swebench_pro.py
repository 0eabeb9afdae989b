"""SWE-bench Pro rows (JSONL, the public dataset's columns).

List columns (fail_to_pass, pass_to_pass, selected_test_files_to_run) arrive as lists,
JSON strings or Python-literal strings; they are parsed as data, never executed. The
per-instance `run_script` and `parser_script` come from the row, or else from
`run_scripts/<instance_id>/run_script.sh` and `parser.py` beside the task file (the
layout of the public evaluation repository).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..contracts.tasks import SweBenchProTask
from ..core.errors import UserError
from ..core.ids import path_id
from .base import parse_list
from .jsonl import resolve_repo_dir, scan_tasks, task_at

SCHEMA = "tasks/swebench_pro.schema.yaml"
FAMILY = "swebench_pro"  # the grader family of every task this loader makes
IMAGE_REPO = "jefzda/sweap-images"
WORKDIR = "/app"
# some images set ENTRYPOINT /bin/bash, which would exit at once under a keep-alive command
KEEP_ALIVE = ["/bin/sh", "-c", "sleep infinity"]
KNOWN = {"instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement", "requirements",
         "interface", "fail_to_pass", "pass_to_pass", "selected_test_files_to_run", "before_repo_set_cmd",
         "dockerhub_tag", "image", "workdir", "run_script", "parser_script", "repo_dir"}


def scan(path: Path) -> list[tuple[SweBenchProTask, Any]]:
    """Every row, validated, with its locator (byte offset, line) for `read`."""
    return scan_tasks(path, SCHEMA, _task)


def read(path: Path, locator: Any) -> SweBenchProTask:
    return task_at(path, locator, SCHEMA, _task)


def default_prompt(problem_statement: str, requirements: str, interface: str) -> str:
    parts = [problem_statement.strip()]
    if requirements.strip():
        parts.append("Requirements:\n" + requirements.strip())
    if interface.strip():
        parts.append("New interfaces introduced:\n" + interface.strip())
    return "\n\n".join(parts) + "\n"


def _script(row: dict, field: str, filename: str, path: Path, where: str) -> str:
    if row.get(field):
        return row[field]
    candidate = path.parent / "run_scripts" / row["instance_id"] / filename
    if candidate.is_file():
        return candidate.read_text(encoding="utf-8")
    raise UserError(f"{where}: field {field}: missing, and {candidate} does not exist; "
                    f"put the script in the row or in run_scripts/<instance_id>/{filename} "
                    f"(`sandbatch fetch-tasks swebench_pro` writes both)")


def _task(row: dict, path: Path, where: str) -> SweBenchProTask:
    iid = row["instance_id"]
    f2p = parse_list(row["fail_to_pass"], f"{where}: field fail_to_pass")
    p2p = parse_list(row["pass_to_pass"], f"{where}: field pass_to_pass")
    if not f2p and not p2p:
        raise UserError(f"{where}: fields fail_to_pass and pass_to_pass: both are empty; nothing would be graded")
    selected = parse_list(row.get("selected_test_files_to_run"), f"{where}: field selected_test_files_to_run")
    tag = row.get("dockerhub_tag")
    if not row.get("image") and not tag and not row.get("repo_dir"):
        raise UserError(f"{where}: field dockerhub_tag: missing; a Pro row needs dockerhub_tag or image")
    repo_dir = resolve_repo_dir(row, path, where)
    requirements, interface = row.get("requirements") or "", row.get("interface") or ""
    return SweBenchProTask(
        id=path_id(iid),
        instance_id=iid,
        family=FAMILY,
        repo=row.get("repo") or "",
        base_commit=row.get("base_commit"),
        problem_statement=row["problem_statement"],
        prompt=default_prompt(row["problem_statement"], requirements, interface),
        prompt_fields={"requirements": requirements, "interface": interface},
        patch=row["patch"],
        test_patch=row.get("test_patch") or "",
        fail_to_pass=f2p,
        pass_to_pass=p2p,
        image=row.get("image") or (f"{IMAGE_REPO}:{tag}" if tag else None),
        workdir=row.get("workdir") or WORKDIR,
        entrypoint=KEEP_ALIVE,
        reset_to_base=True,
        repo_dir=repo_dir,
        before_repo_set_cmd=row.get("before_repo_set_cmd") or "",
        selected_test_files=selected,
        run_script=_script(row, "run_script", "run_script.sh", path, where),
        parser_script=_script(row, "parser_script", "parser.py", path, where),
        extra={k: v for k, v in row.items() if k not in KNOWN},
    )
