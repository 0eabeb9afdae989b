"""The bundled smoke benchmark stays valid: every gold patch resolves its task.

For each row of data/smoke/tasks.jsonl this does what a grader does, with plain git and
pytest: the repository files become a fresh git repo, then
- test_patch alone: every FAIL_TO_PASS test fails and exactly PASS_TO_PASS passes;
- patch + test_patch: exactly FAIL_TO_PASS + PASS_TO_PASS pass.
The wrong-gold fixture must apply cleanly and still leave FAIL_TO_PASS failing.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbatch import REPO_ROOT
from sandbatch.tasks.swebench import scan

TASKS_FILE = REPO_ROOT / "data" / "smoke" / "tasks.jsonl"
WRONG_GOLD_FILE = REPO_ROOT / "tests" / "fixtures" / "smoke_wrong_gold.jsonl"

# `pytest -rA` short summary lines: "PASSED tests/x.py::name" / "FAILED tests/x.py::name - msg"
_SUMMARY = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)", re.M)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


ROWS = _rows(TASKS_FILE)


def _git(cwd: Path, *args: str, stdin: str | None = None) -> None:
    subprocess.run(
        ["git", "-c", "user.name=smoke", "-c", "user.email=smoke@example.invalid",
         "-c", "commit.gpgsign=false", *args],
        cwd=cwd, input=stdin, text=True, check=True, capture_output=True)


def _checkout(row: dict, tasks_file: Path, dest: Path) -> Path:
    """The task's repository at its base commit, as the sandbox builds it."""
    src = (tasks_file.parent / row["repo_dir"]).resolve()
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "base")
    return dest


def _apply(repo: Path, patch: str) -> None:
    _git(repo, "apply", "--whitespace=nowarn", "-", stdin=patch)


def _run_tests(repo: Path, test_cmd: str) -> dict[str, str]:
    """Run test_cmd with this interpreter; test node id -> PASSED/FAILED/ERROR/..."""
    argv = shlex.split(test_cmd)
    assert argv[0] in ("python", "python3") and argv[1:3] == ["-m", "pytest"], test_cmd
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    proc = subprocess.run([sys.executable, *argv[1:]], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=60)
    status: dict[str, str] = {}
    for state, node in _SUMMARY.findall(proc.stdout):
        status.setdefault(node, state)
    assert status, f"no test results in the output of {test_cmd!r}:\n{proc.stdout}\n{proc.stderr}"
    return status


def _passed(status: dict[str, str]) -> set[str]:
    return {node for node, state in status.items() if state == "PASSED"}


def test_rows_load_and_cover_the_shapes_tests_rely_on():
    tasks = [task for task, _ in scan(TASKS_FILE)]  # schema-validated, repo_dir resolved
    assert len(tasks) >= 5
    assert len({t.instance_id for t in tasks}) == len(tasks)
    assert all(t.id == t.instance_id for t in tasks), "smoke ids are already path-safe"
    for t in tasks:
        assert t.repo_dir and Path(t.repo_dir).is_dir()
        assert not (Path(t.repo_dir) / ".git").exists(), f"{t.instance_id}: repo_dir must hold plain files"
        assert t.base_commit is None and t.test_cmd and t.pass_to_pass and t.fail_to_pass
    # a gold fix that adds a file, a task with two FAIL_TO_PASS tests, a test_patch
    # that changes an existing test file
    assert any("\nnew file mode " in t.patch for t in tasks)
    assert any(len(t.fail_to_pass) >= 2 for t in tasks)
    assert any(re.search(r"^--- a/tests/", t.test_patch, re.M) for t in tasks)


@pytest.mark.parametrize("row", ROWS, ids=[r["instance_id"] for r in ROWS])
def test_gold_patch_resolves_task(row, tmp_path):
    f2p, p2p = json.loads(row["FAIL_TO_PASS"]), json.loads(row["PASS_TO_PASS"])
    assert isinstance(row["FAIL_TO_PASS"], str) and isinstance(row["PASS_TO_PASS"], str), \
        "test lists are JSON-encoded strings, as in the public dataset"
    assert f2p and p2p and not set(f2p) & set(p2p)
    for field in ("patch", "test_patch"):
        assert row[field].startswith("diff --git a/") and row[field].endswith("\n"), field
    assert "tests/" not in "".join(re.findall(r"^\+\+\+ b/(\S+)", row["patch"], re.M)), \
        "the gold patch must not touch tests"

    before = _checkout(row, TASKS_FILE, tmp_path / "before")
    _apply(before, row["test_patch"])
    status = _run_tests(before, row["test_cmd"])
    assert _passed(status) == set(p2p), status
    for node in f2p:
        assert status.get(node) in ("FAILED", "ERROR"), f"{node} must fail without the fix: {status}"

    after = _checkout(row, TASKS_FILE, tmp_path / "after")
    _apply(after, row["patch"])
    _apply(after, row["test_patch"])
    status = _run_tests(after, row["test_cmd"])
    assert _passed(status) == set(f2p) | set(p2p), status
    assert set(status) == set(f2p) | set(p2p), f"tests ran that no list names: {status}"


def test_wrong_gold_fixture_applies_but_does_not_resolve(tmp_path):
    (row,) = _rows(WRONG_GOLD_FILE)
    assert any(r["instance_id"] == row["instance_id"] for r in ROWS)
    assert scan(WRONG_GOLD_FILE)[0][0].repo_dir  # repo_dir resolves from tests/fixtures/
    repo = _checkout(row, WRONG_GOLD_FILE, tmp_path / "repo")
    _apply(repo, row["patch"])
    _apply(repo, row["test_patch"])
    status = _run_tests(repo, row["test_cmd"])
    assert not set(json.loads(row["FAIL_TO_PASS"])) <= _passed(status), status
