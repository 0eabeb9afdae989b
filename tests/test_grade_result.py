"""The grade's outcome decided in one place (sandbatch.grading.result.decide) from what the grader
found; the graders end to end are in test_benchmark_grading.py and the test_attacks_* files."""

from __future__ import annotations

import pytest

from sandbatch.core.config import GradingConfig
from sandbatch.core.failures import FailureClass
from sandbatch.grading.result import Findings, GradeResult, Stop, decide, restored_error, run_tampered_error

RESTORED = ({"path": "tests/test_calc.py", "kind": "test_file", "action": "restored"},)
REWRITTEN = ({"path": "tests/test_calc.py::test_divide", "kind": "report_rewritten", "action": "counted_failed"},)


def grading(tampering: str = "neutralise", suspicious: str = "report") -> GradingConfig:
    return GradingConfig(reward_threshold=1.0, in_agent_sandbox=False, inconclusive_retries=0,
                         tampering=tampering, suspicious=suspicious)


def passing(*findings: Findings, **kw) -> GradeResult:
    return GradeResult(patch_applied=True, tests_ran=True, passed=True, findings=list(findings), **kw)


def test_an_infrastructure_stop_is_an_error_never_a_reward():
    d = decide(passing(stop=Stop(FailureClass.TEST_PATCH_APPLY_FAILED, "no")), grading())
    assert (d.status, d.failure_class, d.error, d.resolved, d.reward) == (
        "infra_error", "test_patch_apply_failed", "no", False, 0.0)


def test_a_stop_of_the_patch_is_an_unresolved_grade():
    d = decide(GradeResult(patch_applied=False, stop=Stop(FailureClass.PATCH_APPLY_FAILED)), grading())
    assert (d.status, d.failure_class, d.resolved, d.reward) == ("ok", "patch_apply_failed", False, 0.0)


@pytest.mark.parametrize("tampering, status", [("neutralise", "ok"), ("fail", "tampered")])
def test_restored_files_make_the_grade_tampered_only_under_fail(tampering, status):
    d = decide(passing(Findings(entries=RESTORED, tampered=restored_error(RESTORED))), grading(tampering))
    assert d.status == status
    assert d.resolved == (status == "ok") and d.reward == (1.0 if status == "ok" else 0.0)
    if status == "tampered":
        assert d.failure_class == FailureClass.TAMPERING and d.error.endswith("tests/test_calc.py")


def test_confirmations_count_tests_failed_but_never_make_the_grade_tampered():
    """Jest's report, Go's and googletest's own processes: their findings recount, fail or not."""
    found = Findings(entries=REWRITTEN, failed=frozenset({"tests/test_calc.py::test_divide"}))
    assert decide(passing(found), grading("fail")).status == "ok"
    assert found.recount({"tests/test_calc.py::test_divide": "PASSED", "other": "PASSED"}) == {
        "tests/test_calc.py::test_divide": "FAILED", "other": "PASSED"}


def test_a_run_that_is_no_verdict_is_not_resolved_and_tampered_under_fail():
    run = Findings(entries=REWRITTEN, resolvable=False, tampered=run_tampered_error(REWRITTEN))
    d = decide(passing(run), grading())
    assert (d.status, d.resolved, d.reward) == ("ok", False, 0.0)
    d = decide(passing(run), grading("fail"))
    assert (d.status, d.failure_class, d.error) == ("tampered", "tampering",
                                                    "the test run was tampered with: report_rewritten")


def test_suspicious_code_fails_only_under_suspicious_fail():
    hit = [{"path": "calc.py", "line": 3, "reason": "imports the test runner", "text": "import pytest"}]
    assert decide(passing(suspicious=hit), grading()).resolved
    d = decide(passing(suspicious=hit), grading(suspicious="fail"))
    assert (d.status, d.failure_class) == ("tampered", "suspicious") and "calc.py:3" in d.error


def test_tests_that_did_not_run_and_a_verifier_reward():
    assert decide(GradeResult(patch_applied=True), grading()).failure_class == FailureClass.TESTS_DID_NOT_RUN
    d = decide(GradeResult(tests_ran=True, passed=False, reward=0.5, report_resolution=False), grading())
    assert (d.resolved, d.reward) == (False, 0.5)


def test_the_record_is_built_once_from_the_result():
    run = Findings(entries=REWRITTEN, resolvable=False, report={"verdict": "ok"})
    rec = passing(Findings(entries=RESTORED), run, report={"patch_exists": True},
                  tests_status={"FAIL_TO_PASS": {"success": [], "failure": []}}).record(grading(), patch_empty=False)
    assert rec.tampering == [*RESTORED, *REWRITTEN] and not rec.resolved and rec.reward == 0.0
    assert rec.report == {"patch_exists": True, "verdict": "ok", "resolved": False,
                          "tests_status": {"FAIL_TO_PASS": {"success": [], "failure": []}}}
