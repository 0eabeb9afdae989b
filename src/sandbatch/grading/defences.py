"""What grading checks of a test run beyond the log parser's statuses (docs/benchmarks.md,
"What grading checks of the run"): the verdict channel (verdict), what the runner plugins' own
checks found (plugin_findings), the log's consistency (log_consistency), the outcomes the tests
declare (declared), the build phase (build_phase), pytest's rootdir. Their findings are a value
(result.Findings); what they make of the grade is decided in result.decide.

One call per test run, shared by the graders that run pytest suites (SWE-bench family,
SWE-bench Pro). grading.tampering: log_only grades the log alone, as the benchmarks' own
harnesses do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Collection

from . import build_phase, declared, log_consistency, plugin_findings, verdict
from .result import Findings, failed_since, run_tampered_error

if TYPE_CHECKING:
    from ..sandbox import Sandbox


async def settle(channel: verdict.Channel | None, sandbox: "Sandbox", log: str, status: dict[str, str],
                 runner_exit: int | None, decisive: set[str], expected: bool,
                 as_log: Callable[[dict[str, str]], dict[str, str]], printed: bytes | None = None,
                 placed: dict[str, str] | None = None, placed_first: bool | None = None,
                 touched: Collection[str] | None = None) -> Findings:
    """What one test run's checks found: the tests the verdict, the declarations or the build phase
    contradict are counted failed (Findings.failed; `status` is left as it is). expected: the test
    command starts the runner the channel is loaded into (verdict.compare). runner_exit: the test
    command's exit status where it is the runner's own (log_consistency.check); pytest's comes from the
    verdict. printed: the channel's listing as the test command's exec printed it (Channel.after_run).
    placed: the test files as placed (verdict.placed_from), whose source declares XFAIL and skips.
    placed_first: the eval script carries build_phase's records (None: it does not), and whether the
    tests were placed before its build. touched: the paths the patch adds, changes or deletes (None:
    unknown); workdir code imported at start-up is a hook only if the patch touched it (an image's
    own start-up import of the repository, matplotlib's namespace-package .pth say, is not).
    Not resolved when the runner was patched or the log is inconsistent; a tampered grade with
    grading.tampering: fail."""
    if channel is None:
        return Findings(report={"verdict": "log_only"})
    seen = status
    status = dict(status)  # the checks below count tests failed in place: in this copy
    v = await channel.read(sandbox, printed)
    if touched is not None:
        v.findings = plugin_findings.of_the_patch(v.findings, touched)
    verdict.check_rootdir(verdict.rootdirs(v, log), sandbox.workdir)
    inconsistent = log_consistency.check(log, status, verdict.pytest_exit(v), runner_exit)
    rewritten, resolvable = verdict.compare(v, expected, status, decisive, as_log, frozenset(channel.test_files))
    rewritten += declared.check(status, decisive, None if placed is None else declared.Sources(placed))
    built, clean = build_phase.judge(v.records, status, decisive, placed_first) if placed_first is not None \
        else ([], True)
    entries = tuple(built + rewritten + inconsistent)
    report: dict = {"verdict": v.state if v.state != "missing" or expected else "not_pytest"}
    if v.isolation:
        report["verdict_isolation"] = v.isolation
    if placed_first is not None:
        report["build_phase"] = build_phase.summary(v.records, placed_first)
    return Findings(entries=entries, failed=failed_since(seen, status), tampered=run_tampered_error(entries),
                    resolvable=resolvable and clean and not inconsistent, report=report)
