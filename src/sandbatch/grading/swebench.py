"""SWE-bench family grading (Verified, Multilingual, self-describing rows, the smoke tasks)
with the `swebench` package's pieces: the eval script from its per-repo specs, its log
parsers, its report comparison.

In a fresh sandbox from the task image: apply the model patch (with fallbacks), put back
what it may not change (tests, runner config and hooks, shims: grading.tamper), then run
the eval script - reset the test files, apply test_patch, run the tests between the
swebench markers - and compare the parsed statuses with FAIL_TO_PASS / PASS_TO_PASS.
The test command's own exit code is recorded after the end marker; a run that printed
no test results, or whose log claims no failure while the command failed, did not
really run its suite and never counts as resolved.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable

from ..core.failures import FailureClass
from ..contracts.tasks import SweBenchTask
from .. import trace
from . import (GradeContext, build_phase, defences, go_confirm, googletest, jest_report, tamper, unittest_verdict,
               verdict)
from .apply import apply_patch, keep_code_only
from .result import GradeResult, Stop

EXIT_VAR = "SANDBATCH_TEST_EXIT_CODE"
_EXIT_RE = re.compile(rf"^{EXIT_VAR}: (-?\d+)\s*$", re.M)
TEST_PATCH_FAILED = "SANDBATCH_TEST_PATCH_FAILED"
HEREDOC = "EOF_SANDBATCH_7d1c9"
PARSER_MODULES = ("python", "javascript", "go", "java", "rust", "c", "php", "ruby")
PARSER_ALIASES = {"pytest": "parse_log_pytest"}


# the runners whose decisive outcomes are confirmed outside the test process (go_confirm, reports' canary),
# by the parser of their log
CONFIRMED_RUNNERS = {"parse_log_jest": "jest", "parse_log_jest_json": "jest", "parse_log_immutable_js": "jest",
                     "parse_log_gotest": "go test"}


class Unsupported(Exception):
    """The swebench package has no spec or parser for this row."""


@dataclass
class EvalPlan:
    script: str
    parser: Callable[[str, Any], dict[str, str]]
    test_spec: Any  # what the parser gets as its second argument
    eval_type: str  # pass_and_fail | fail_only


def _parser(name: str) -> Callable[[str, Any], dict[str, str]]:
    import importlib

    name = PARSER_ALIASES.get(name, name)
    for mod in PARSER_MODULES:
        module = importlib.import_module(f"swebench.harness.log_parsers.{mod}")
        fn = getattr(module, name, None)
        if callable(fn) and name.startswith("parse_log_"):
            return fn
    raise Unsupported(f"log_parser {name!r} is not a parser of swebench's harness.log_parsers")


def _with_exit_code(lines: list[str]) -> list[str]:
    """Record the test command's exit status right after it, echoed after the end marker."""
    from swebench.harness.constants import END_TEST_OUTPUT

    for i, line in enumerate(lines):
        if END_TEST_OUTPUT in line:
            return [*lines[:i], f"{EXIT_VAR}=$?", line, f'echo "{EXIT_VAR}: ${EXIT_VAR}"', *lines[i + 1:]]
    return lines


def _script(lines: list[str]) -> str:
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", *_with_exit_code(lines)]) + "\n"


def _reset_lines(files: list[str], ref: str) -> list[str]:
    q = shlex.quote(ref)
    return [f"git checkout -q {q} -- {shlex.quote(f)} 2>/dev/null || rm -f {shlex.quote(f)}" for f in files]


def plan(task: SweBenchTask, workdir: str, base_ref: str) -> EvalPlan:
    """The eval script, parser and eval type of a row; Unsupported if swebench cannot grade it."""
    from swebench.harness.constants import (END_TEST_OUTPUT, FAIL_ONLY_REPOS, MAP_REPO_TO_EXT,
                                            MAP_REPO_VERSION_TO_SPECS, START_TEST_OUTPUT)
    from swebench.harness.test_spec.test_spec import TestSpec
    from swebench.harness.utils import get_modified_files

    lines: list[str]
    if task.eval_script:  # self-describing row: its own script, as the 5.x datasets ship it
        lines = [ln for ln in task.eval_script.strip().split("\n") if ln not in ("#!/bin/bash", "set -uxo pipefail")]
        parser = _parser(task.log_parser or "")
    elif task.test_cmd:  # bundled rows (smoke): the same shape, with the row's test command
        files = get_modified_files(task.test_patch)
        lines = [
            f"cd {shlex.quote(workdir)}",
            *_reset_lines(files, base_ref),
            f"git apply -v - <<'{HEREDOC}' || {{ echo {TEST_PATCH_FAILED}; exit 3; }}\n{task.test_patch}\n{HEREDOC}",
            f": '{START_TEST_OUTPUT}'",
            task.test_cmd,
            f": '{END_TEST_OUTPUT}'",
            *_reset_lines(files, base_ref),
        ]
        parser = _parser(task.log_parser or "pytest")
    else:  # classic row: the package's per-repo spec builds the script
        from swebench.harness.log_parsers import MAP_REPO_TO_PARSER
        from swebench.harness.test_spec.create_scripts import make_eval_script_list

        specs = MAP_REPO_VERSION_TO_SPECS.get(task.repo, {}).get(task.version or "")
        if specs is None:
            raise Unsupported(f"swebench {_version()} has no spec for repo {task.repo!r} version {task.version!r}; "
                              f"give the row its own eval_script and log_parser")
        instance = {"instance_id": task.instance_id, "repo": task.repo, "version": task.version,
                    "base_commit": task.base_commit, "test_patch": task.test_patch,
                    "FAIL_TO_PASS": task.fail_to_pass, "PASS_TO_PASS": task.pass_to_pass}
        lines = make_eval_script_list(instance, specs, "testbed", workdir, task.base_commit, task.test_patch)
        parser = _parser(task.log_parser) if task.log_parser else MAP_REPO_TO_PARSER[task.repo]
    eval_type = task.eval_type or ("fail_only" if task.repo in FAIL_ONLY_REPOS else "pass_and_fail")
    spec = TestSpec(instance_id=task.instance_id, repo=task.repo, version=task.version or "",
                    repo_script_list=[], eval_script_list=lines, env_script_list=[], arch="x86_64",
                    FAIL_TO_PASS=task.fail_to_pass, PASS_TO_PASS=task.pass_to_pass,
                    language=MAP_REPO_TO_EXT.get(task.repo, "py"), docker_specs={}, namespace=None)
    return EvalPlan(script=_script(lines), parser=parser, test_spec=spec, eval_type=eval_type)


def _version() -> str:
    from importlib.metadata import version

    return version("swebench")


def with_channel(script: str, channel: verdict.Channel, workdir: str, isolate: bool, users: bool = True) -> str:
    """The eval script with the verdict channel's exports and its recorder (Channel.prologue) right before
    the test output starts. isolate: the test command's lines run from tests.sh (which the prologue
    writes) as the test user where the sandbox lets grading make one (users), and the epilogue follows
    the end marker; where the script builds between build_phase's records, the prologue comes before
    the build, which runs as that user too (build_phase.as_test_user)."""
    from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT

    lines = script.split("\n")
    at = next((i for i, ln in enumerate(lines) if START_TEST_OUTPUT in ln), len(lines))
    end = next((i for i, ln in enumerate(lines) if END_TEST_OUTPUT in ln and i > at), len(lines))
    if not isolate or end == len(lines):
        return "\n".join([*lines[:at], channel.exports(), *lines[at:]])
    body = lines[at + 1:end]
    status = [ln for ln in body[-1:] if ln.startswith(f"{EXIT_VAR}=")]  # the test command's status, kept
    tests = body[:len(body) - len(status)]
    prologue = channel.prologue(workdir, tests, users)
    build = build_phase.build_lines(lines[:at])
    if build is not None:  # the build too, as the test user; the script's own setup before it stays in its shell
        start, stop = build
        head = [*lines[:start], prologue,
                *build_phase.as_test_user(lines[start:stop], channel.dir, channel.uid, verdict.FD, workdir),
                *lines[stop:at], channel.exports()]
    else:
        head = [*lines[:at], channel.exports(), prologue]
    return "\n".join([*head, lines[at], f"sbv_as_tests bash {shlex.quote(channel.dir)}/tests.sh", *status,
                      lines[end], channel.epilogue(workdir), *lines[end + 1:]])


def test_command(script: str) -> str:
    """The eval script's test command: its lines between the test-output markers."""
    from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT

    lines = script.split("\n")
    at = next((i for i, ln in enumerate(lines) if START_TEST_OUTPUT in ln), len(lines))
    end = next((i for i, ln in enumerate(lines) if END_TEST_OUTPUT in ln and i > at), len(lines))
    return "\n".join(lines[at + 1:end])


def test_output(log: str) -> str:
    """The part of the log between swebench's markers (the whole log without them)."""
    from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT

    if START_TEST_OUTPUT in log and END_TEST_OUTPUT in log:
        return log.split(START_TEST_OUTPUT, 1)[1].split(END_TEST_OUTPUT, 1)[0]
    return log


def parse_log(log: str, p: EvalPlan) -> tuple[dict[str, str], bool]:
    """(status map, found) as swebench's get_logs_eval reads a log: only between its markers
    (the whole log as a fallback), nothing when an error marker is present."""
    from swebench.harness.constants import (APPLY_PATCH_FAIL, END_TEST_OUTPUT, RESET_FAILED, START_TEST_OUTPUT,
                                            TESTS_ERROR, TESTS_TIMEOUT)

    if any(code in log for code in (APPLY_PATCH_FAIL, RESET_FAILED, TESTS_ERROR, TESTS_TIMEOUT)):
        return {}, False
    if START_TEST_OUTPUT not in log or END_TEST_OUTPUT not in log:
        return {}, False
    status = p.parser(test_output(log), p.test_spec) or p.parser(log, p.test_spec)
    return status, True


def report(status: dict[str, str], p: EvalPlan) -> tuple[dict[str, dict[str, list[str]]], bool]:
    """swebench's comparison: per-group success/failure lists, and whether it is fully resolved."""
    from swebench.harness.constants import (FAIL_TO_FAIL, FAIL_TO_PASS, PASS_TO_FAIL, PASS_TO_PASS, EvalType,
                                            ResolvedStatus)
    from swebench.harness.grading import get_eval_tests_report, get_resolution_status

    gold = {FAIL_TO_PASS: p.test_spec.FAIL_TO_PASS, PASS_TO_PASS: p.test_spec.PASS_TO_PASS,
            FAIL_TO_FAIL: [], PASS_TO_FAIL: []}
    tests_status = get_eval_tests_report(status, gold, eval_type=EvalType(p.eval_type))
    return tests_status, get_resolution_status(tests_status) == ResolvedStatus.FULL.value


async def grade(g: GradeContext) -> GradeResult:
    sandbox, task, log = g.sandbox, g.task, g.log
    result = GradeResult(log_path=g.log_path, report={"patch_is_None": False, "patch_exists": True,
                                                      "patch_successfully_applied": False, "resolved": False})
    try:
        p = plan(task, sandbox.workdir, g.base_ref)
    except Unsupported as exc:
        result.stop = Stop(FailureClass.GRADING_UNSUPPORTED, str(exc))
        return result
    from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT

    kind = unittest_verdict.for_parser(p.parser.__name__)  # pytest's channel, or unittest's
    defended = g.cfg.grading.tampering != "log_only"
    channel = kind.new(sandbox.tmpdir, tamper.touched_paths(task.test_patch or "")) if defended else None
    # runner_report: a runner's own report beside the log (Jest); go_check: Go's decisive tests, each
    # confirmed by a process of its own after the run
    script, runner_report, go_check = p.script, None, None
    decisive = {*p.test_spec.FAIL_TO_PASS, *p.test_spec.PASS_TO_PASS}
    eval_path = f"{sandbox.tmpdir}/eval.sh"
    placed_first = None  # with the defences: whether the tests were placed before the build (build_phase)
    if channel is not None:
        script, placed_first = build_phase.place_first(script, task.test_patch or "", sandbox.workdir)
        grader_files = [eval_path, *channel.uploads(sandbox), f"{channel.dir}/{build_phase.PROBE}"]
        script = build_phase.instrument(script, channel.dir, build_phase.protected(
            list(tamper.task_test_files(task)), build_phase.restorable(g.patch, tamper.task_test_files(task)),
            grader_files), sandbox.workdir, START_TEST_OUTPUT, END_TEST_OUTPUT)
        # the test user where the channel answers (a Python runner's log: pytest's or unittest's); other
        # runners' tests run as before (their toolchains' caches are the image user's)
        script = with_channel(script, channel, sandbox.workdir, p.parser.__module__.endswith(".python"),
                              sandbox.separate_users)
        script, runner_report = jest_report.instrument(script, START_TEST_OUTPUT, END_TEST_OUTPUT, sandbox.tmpdir,
                                                       tamper.touched_paths(task.test_patch or ""),
                                                       await jest_report.package_scripts(sandbox, test_command(script)))
        script, go_check = go_confirm.instrument(script, END_TEST_OUTPUT, EXIT_VAR, sandbox.tmpdir, decisive,
                                                 sandbox.separate_users)
    # every file of the grade goes up with the patch, the snapshot is taken in the patch's exec
    files = {eval_path: (script.encode("utf-8"), 0o755), **(channel.uploads(sandbox) if channel else {}),
             **(build_phase.uploads(channel.dir) if channel else {})}
    with trace.span("grade.apply"):
        applied = await apply_patch(sandbox, g.patch, f"{sandbox.tmpdir}/model.patch", result, log, g.timeout,
                                    also=files, snapshot=g.base_ref if defended else None)
    if not applied:
        return result
    result.report["patch_successfully_applied"] = True
    if not await keep_code_only(g, result, applied.snap):
        return result
    after, marker = channel.after_run() if channel is not None else ("", "")  # the verdict, in the same exec
    with trace.span("grade.tests"):
        run = await sandbox.exec(f"bash {shlex.quote(eval_path)} 2>&1{after}", timeout=g.timeout)
    out, printed = verdict.taken_from(run.stdout, marker) if channel is not None else (run.stdout, None)
    out, placed = verdict.placed_from(out, channel.placed_marker) if channel is not None else (out, None)
    out += f"\n{run.stderr}" if run.stderr else ""
    log += ["$ bash eval.sh", out]
    if TEST_PATCH_FAILED in out:
        result.stop = Stop(FailureClass.TEST_PATCH_APPLY_FAILED,
                           "the task's test_patch did not apply after resetting the test files")
        return result
    m = _EXIT_RE.findall(out)
    result.test_exit_code = int(m[-1]) if m else (None if run.timed_out else run.exit_code)
    if run.timed_out:
        result.stop = Stop(FailureClass.TESTS_TIMEOUT)
        return result
    status, found = parse_log(out, p)
    result.test_results = dict(status)
    lines = unittest_verdict.as_log if kind is unittest_verdict.UnittestChannel else (
        lambda seen: "\n".join(f"{s} {t}" for t, s in seen.items()))
    checked = await defences.settle(
        channel, sandbox, test_output(out), status, result.test_exit_code, decisive,
        kind is unittest_verdict.UnittestChannel or verdict.runs_pytest(test_command(p.script)),
        lambda seen: p.parser(lines(seen), p.test_spec) if seen else {}, printed, placed, placed_first,
        frozenset(tamper.touched_paths(g.patch)))
    status = checked.recount(status)
    # the runners' outcomes confirmed outside the test process, each counting failed what it does not confirm
    confirmations = [await jest_report.reconcile(sandbox, runner_report, status)]
    status = confirmations[-1].recount(status)
    if defended and googletest.applies(p.parser.__name__, test_command(p.script)):
        # googletest prints from the process of the code under test: its tests' own exit statuses decide
        confirmations.append(await googletest.confirm(sandbox, test_command(p.script), status, decisive, g.timeout))
        status = confirmations[-1].recount(status)
    confirmations.append(await go_confirm.confirm(sandbox, go_check, status))
    status = confirmations[-1].recount(status)
    for f in confirmations:
        result.found(f, log)
    if defended and (runner := CONFIRMED_RUNNERS.get(p.parser.__name__)):
        # a command the confirmation cannot be added to: its passes are the test process's word alone
        result.report["outcomes_confirmed"] = (runner_report if runner == "jest" else go_check) is not None
        if not result.report["outcomes_confirmed"]:
            log.append(f"{runner}: no confirmation outside the test process could be added to this test command "
                       "(report.outcomes_confirmed: false)")
    result.tests_ran = found and bool(status)
    if result.tests_ran and result.test_exit_code not in (None, 0) and not any(
            s in ("FAILED", "ERROR") for s in result.test_results.values()):
        # the log claims no failure while the test command failed: it is not this run's log
        result.tests_ran = False
        result.failure_class = FailureClass.TEST_LOG_INCONSISTENT
    if result.tests_ran:
        result.tests_status, result.passed = report(status, p)
    result.found(checked, log)
    return result
