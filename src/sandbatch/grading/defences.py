"""What grading checks of a test run beyond the log parser's statuses (docs/benchmarks.md,
"What grading checks of the run"): the verdict channel (verdict), what the runner plugins' own
checks found (plugin_findings), the log's consistency (log_consistency), the outcomes the tests
declare (declared), the build phase (build_phase), pytest's rootdir.

One call per test run, shared by the graders that run pytest suites (SWE-bench family,
SWE-bench Pro). grading.tampering: log_only grades the log alone, as the benchmarks' own
harnesses do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Collection

from ..core.failures import FailureClass
from . import build_phase, declared, log_consistency, plugin_findings, verdict

if TYPE_CHECKING:
    from ..rollout.records import GradeRecord
    from ..sandbox import Sandbox
    from . import GradeContext


@dataclass
class Findings:
    entries: list[dict[str, str]] = field(default_factory=list)
    resolvable: bool = True  # False: runner_patched or inconsistent_log, the rollout is not resolved
    verdict: str = "log_only"  # the verdict channel's state (grade.json report.verdict)
    isolation: str = ""  # "separated": the tests ran as a user of their own (grade.json report.verdict_isolation)
    build: dict | None = None  # what build_phase recorded (grade.json report.build_phase)


async def settle(channel: verdict.Channel | None, sandbox: "Sandbox", log: str, status: dict[str, str],
                 runner_exit: int | None, decisive: set[str], expected: bool,
                 as_log: Callable[[dict[str, str]], dict[str, str]], printed: bytes | None = None,
                 placed: dict[str, str] | None = None, placed_first: bool | None = None,
                 touched: Collection[str] | None = None) -> Findings:
    """Check one test run; tests the verdict contradicts are set to FAILED in `status`. expected: the
    test command starts the runner the channel is loaded into (verdict.compare). runner_exit: the test
    command's exit status where it is the runner's own (log_consistency.check); pytest's comes from the
    verdict. printed: the channel's listing as the test command's exec printed it (Channel.after_run).
    placed: the test files as placed (verdict.placed_from), whose source declares XFAIL and skips.
    placed_first: the eval script carries build_phase's records (None: it does not), and whether the
    tests were placed before its build. touched: the paths the patch adds, changes or deletes (None:
    unknown); workdir code imported at start-up is a hook only if the patch touched it (an image's
    own start-up import of the repository, matplotlib's namespace-package .pth say, is not)."""
    if channel is None:
        return Findings()
    v = await channel.read(sandbox, printed)
    if touched is not None:
        v.findings = plugin_findings.of_the_patch(v.findings, touched)
    verdict.check_rootdir(verdict.rootdirs(v, log), sandbox.workdir)
    inconsistent = log_consistency.check(log, status, verdict.pytest_exit(v), runner_exit)
    rewritten, resolvable = verdict.compare(v, expected, status, decisive, as_log, frozenset(channel.test_files))
    rewritten += declared.check(status, decisive, None if placed is None else declared.Sources(placed))
    built, clean = build_phase.judge(v.records, status, decisive, placed_first) if placed_first is not None \
        else ([], True)
    found = Findings(entries=built + rewritten + inconsistent, resolvable=resolvable and clean and not inconsistent,
                     verdict=v.state if v.state != "missing" or expected else "not_pytest", isolation=v.isolation)
    if placed_first is not None:
        found.build = build_phase.summary(v.records, placed_first)
    return found


def apply(g: "GradeContext", rec: "GradeRecord", found: Findings) -> None:
    """The findings into grade.json (tampering, report.verdict) and the outcome: not resolved when the
    runner was patched or the log is inconsistent; status tampered with grading.tampering: fail."""
    rec.tampering += found.entries
    rec.report["verdict"] = found.verdict
    if found.isolation:
        rec.report["verdict_isolation"] = found.isolation
    if found.build is not None:
        rec.report["build_phase"] = found.build
    if not found.resolvable:
        rec.resolved = False
    if found.entries and g.cfg.grading.tampering == "fail":
        rec.status, rec.failure_class, rec.resolved = "tampered", FailureClass.TAMPERING, False
        rec.error = f"the test run was tampered with: {', '.join(e['kind'] for e in found.entries[:5])}"
    rec.reward = 1.0 if rec.resolved else 0.0
