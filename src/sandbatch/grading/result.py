"""A grade as a value. The grader gathers what it found into a GradeResult: whether the patch
applied, what each defence found (Findings: the restore of what the patch may not change, the
checks of the test run, the confirmations of the runners' outcomes), the tests' statuses and
the benchmark's own judgement of them. The outcome (status, failure class, resolved, reward) is
decided from that in one place, `decide`, under grading.tampering and grading.suspicious; the
grade record is built from the result once, at the end (`GradeResult.record`, called by the
grade step).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from ..core.failures import FailureClass, FailureKind
from ..contracts.records import GradeRecord

if TYPE_CHECKING:
    from ..core.config import GradingConfig


@dataclass(frozen=True)
class Findings:
    """What one defence found: tampering entries ({path, kind, action, ...}), the tests it counts
    failed, the lines it adds to grade.log, what it adds to grade.json's report."""
    entries: tuple[dict[str, str], ...] = ()
    failed: frozenset[str] = frozenset()
    log: tuple[str, ...] = ()
    resolvable: bool = True  # False: the run as a whole is no verdict (runner_patched, inconsistent_log, ...)
    # with grading.tampering: fail, entries make the grade `tampered` with this error (None: they count
    # tests failed, nothing more)
    tampered: str | None = None
    report: dict[str, Any] = field(default_factory=dict)

    def recount(self, status: dict[str, str]) -> dict[str, str]:
        """`status` with the tests this defence counts failed set to FAILED."""
        return {t: "FAILED" if t in self.failed else s for t, s in status.items()}


def failed_since(before: dict[str, str], after: dict[str, str]) -> frozenset[str]:
    """The tests `after` has FAILED that `before` did not (a check that counts tests failed in place)."""
    return frozenset(t for t, s in after.items() if s == "FAILED" and before.get(t) != "FAILED")


@dataclass(frozen=True)
class Stop:
    """Where grading stopped before a verdict: an infrastructure class is an infra_error (retried)."""
    failure_class: FailureClass
    error: str | None = None


@dataclass
class GradeResult:
    """What a grader found, gathered as it goes; nothing here is decided (see `decide`)."""
    log_path: str | None = None
    report: dict[str, Any] = field(default_factory=dict)  # the benchmark's own per-instance report
    patch_applied: bool | None = None
    apply_method: str | None = None
    findings: list[Findings] = field(default_factory=list)  # in the order the defences ran
    suspicious: list[dict[str, Any]] = field(default_factory=list)  # grading.suspicion's hits
    tests_ran: bool = False
    test_exit_code: int | None = None
    test_results: dict[str, str] = field(default_factory=dict)  # the log parser's statuses
    tests_status: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    passed: bool = False  # the benchmark's own judgement of the tests (all decisive tests pass)
    reward: float | None = None  # the verifier's own reward (Terminal-Bench); else 1 when resolved
    failure_class: FailureClass | None = None  # what went wrong without stopping the grade
    stop: Stop | None = None
    report_resolution: bool = True  # the report gets `resolved` and `tests_status` once the tests ran

    def found(self, f: Findings, log: list[str] | None = None) -> Findings:
        """Keep one defence's findings (and their lines in `log`)."""
        self.findings.append(f)
        if log is not None:
            log += f.log
        return f

    @property
    def tampering(self) -> list[dict[str, str]]:
        return [e for f in self.findings for e in f.entries]

    def record(self, grading: "GradingConfig", **step: Any) -> GradeRecord:
        """The grade record: the findings as they were, the outcome as `decide` makes it; `step`: the
        grade step's own fields (patch_empty, network)."""
        d = decide(self, grading)
        report = dict(self.report)
        for f in self.findings:
            report.update(f.report)
        if self.report_resolution and self.tests_ran:
            report.update(resolved=d.resolved, tests_status=self.tests_status)
        return GradeRecord(status=d.status, failure_class=d.failure_class, error=d.error, reward=d.reward,
                           resolved=d.resolved, patch_applied=self.patch_applied, apply_method=self.apply_method,
                           tests_ran=self.tests_ran, test_exit_code=self.test_exit_code,
                           tests_status=self.tests_status, test_results=self.test_results, report=report,
                           tampering=self.tampering, suspicious=self.suspicious, log_path=self.log_path, **step)


@dataclass(frozen=True)
class Decision:
    status: str = "ok"  # ok | tampered | infra_error
    failure_class: str | None = None
    error: str | None = None
    resolved: bool = False
    reward: float = 0.0


def _first(items: Iterable[str], n: int = 5) -> str:
    return ", ".join(list(items)[:n])


def decide(r: GradeResult, grading: "GradingConfig") -> Decision:
    """The outcome of a grade, the one place it is decided: an infrastructure stop is an error, never a
    0; a finding under grading.tampering / grading.suspicious: fail makes the grade `tampered`; else
    resolved when the benchmark's judgement passes and no defence found the run to be no verdict."""
    if r.stop is not None and r.stop.failure_class.kind == FailureKind.INFRA:
        return Decision("infra_error", r.stop.failure_class, r.stop.error)
    fail = grading.tampering == "fail"
    for f in r.findings:
        if fail and f.entries and f.tampered is not None:
            return Decision("tampered", FailureClass.TAMPERING, f.tampered)
    if r.suspicious and grading.suspicious == "fail":
        first = r.suspicious[0]
        return Decision("tampered", FailureClass.SUSPICIOUS,
                        f"the patch's code reaches into the test runner ({len(r.suspicious)} lines), first "
                        f"{first['path']}:{first['line']}: {first['reason']}")
    if r.stop is not None:
        return Decision("ok", r.stop.failure_class, r.stop.error)
    resolved = r.tests_ran and r.passed and all(f.resolvable for f in r.findings)
    failure_class = r.failure_class or (None if r.tests_ran else FailureClass.TESTS_DID_NOT_RUN)
    reward = r.reward if r.reward is not None else (1.0 if resolved else 0.0)
    return Decision("ok", failure_class, None, resolved, reward)


def restored_error(entries: Iterable[dict[str, str]]) -> str:
    return f"the patch changes what grades it: {_first(e['path'] for e in entries)}"


def run_tampered_error(entries: Iterable[dict[str, str]]) -> str:
    return f"the test run was tampered with: {_first(e['kind'] for e in entries)}"
