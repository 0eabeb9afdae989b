"""Grading of SWE-bench-style tasks: apply, reset tests, apply test_patch, run, compare.

Runs in a fresh sandbox made from the task's image (plus its bundled repository files),
never in the agent's sandbox.
"""

from __future__ import annotations

import re
import shlex

from ..records import GradeRecord
from ..sandbox import Sandbox
from ..tasks import Task
from .apply import applied_method, apply_script
from .parsers import PARSERS

_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.M)
PASSING = {"PASSED", "XFAIL"}


def files_in_patch(patch: str) -> list[str]:
    names: list[str] = []
    for a, b in _DIFF_FILE.findall(patch):
        for name in (a, b):
            if name not in names:
                names.append(name)
    return names


def compare(results: dict[str, str], fail_to_pass: list[str], pass_to_pass: list[str]) -> dict[str, dict[str, list[str]]]:
    """SWE-bench's report shape: for each group, which tests passed and which did not."""
    def split(tests: list[str]) -> dict[str, list[str]]:
        return {"success": [t for t in tests if results.get(t) in PASSING],
                "failure": [t for t in tests if results.get(t) not in PASSING]}

    return {"FAIL_TO_PASS": split(fail_to_pass), "PASS_TO_PASS": split(pass_to_pass)}


async def grade(sandbox: Sandbox, task: Task, patch: str, base_ref: str, timeout: float,
                log_path: str) -> GradeRecord:
    """Grade `patch` in `sandbox` (already holding the repository at `base_ref`)."""
    rec = GradeRecord(log_path=log_path)
    log: list[str] = []
    model_patch = f"{sandbox.tmpdir}/model.patch"
    await sandbox.upload(model_patch, patch.encode("utf-8"))
    applied = await sandbox.exec(apply_script(model_patch), timeout=timeout)
    log += ["$ apply model patch", applied.stdout, applied.stderr]
    rec.apply_method = applied_method(applied.stdout)
    rec.patch_applied = rec.apply_method is not None
    if not rec.patch_applied:
        rec.failure_class = "patch_apply_failed"
        _write_log(log_path, log)
        return rec

    # the agent may have edited the tests: put them back before applying the real ones
    test_patch = f"{sandbox.tmpdir}/test.patch"
    await sandbox.upload(test_patch, task.test_patch.encode("utf-8"))
    resets = " ".join(
        f"git checkout -q {shlex.quote(base_ref)} -- {shlex.quote(f)} 2>/dev/null || rm -f {shlex.quote(f)};"
        for f in files_in_patch(task.test_patch))
    prep = await sandbox.exec(f"{resets} git apply --verbose {shlex.quote(test_patch)}", timeout=timeout)
    log += ["$ reset test files and apply test patch", prep.stdout, prep.stderr]
    if not prep.ok:
        rec.status, rec.failure_class = "infra_error", "test_patch_apply_failed"
        rec.error = f"the task's test_patch did not apply: {prep.stderr.strip()[-200:]}"
        _write_log(log_path, log)
        return rec

    run = await sandbox.exec(task.test_cmd or "python -m pytest -rA", timeout=timeout)
    log += [f"$ {task.test_cmd}", run.stdout, run.stderr]
    _write_log(log_path, log)
    rec.test_exit_code = run.exit_code
    if run.timed_out:
        rec.failure_class = "tests_timeout"
    results = PARSERS[task.log_parser](run.stdout + "\n" + run.stderr)
    rec.test_results = results
    rec.tests_ran = bool(results)
    rec.tests_status = compare(results, task.fail_to_pass, task.pass_to_pass)
    rec.resolved = rec.tests_ran and not rec.tests_status["FAIL_TO_PASS"]["failure"] and not rec.tests_status["PASS_TO_PASS"]["failure"]
    rec.reward = 1.0 if rec.resolved else 0.0
    if not rec.tests_ran and rec.failure_class is None:
        rec.failure_class = "tests_did_not_run"
    return rec


def _write_log(path: str, parts: list[str]) -> None:
    from ..util import write_atomic

    write_atomic(path, "\n".join(p for p in parts if p) + "\n")
