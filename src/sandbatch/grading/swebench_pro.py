"""SWE-bench Pro grading, as the public evaluation does it, in a fresh sandbox:

reset to the base commit, apply the model patch (with fallbacks), run the last line of
before_repo_set_cmd (it checks out the graded test files), `bash run_script.sh <selected
test files, comma-separated>`, then `python parser.py stdout stderr output.json`, which
writes {"tests": [{"name", "status"}]}. Resolved iff every test of fail_to_pass and
pass_to_pass is PASSED. An inconclusive run (no parsable output.json, no tests, a
timeout) is retried grading.inconclusive_retries times, then counts as unresolved.
"""

from __future__ import annotations

import json
import shlex

from ..core.failures import FailureClass
from . import GradeContext, defences, tamper, verdict
from .apply import apply_patch, keep_code_only
from .result import GradeResult, Stop


def last_command(before_repo_set_cmd: str) -> str:
    lines = [ln.strip() for ln in (before_repo_set_cmd or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def parse_output(data: bytes) -> dict[str, str] | None:
    """output.json -> {test name: status}; None when it is not the parser's shape."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    tests = doc.get("tests") if isinstance(doc, dict) else None
    if not isinstance(tests, list):
        return None
    out: dict[str, str] = {}
    for t in tests:
        if isinstance(t, dict) and isinstance(t.get("name"), str):
            out[t["name"]] = str(t.get("status", "")).upper()
    return out


def compare(status: dict[str, str], f2p: list[str], p2p: list[str]) -> dict[str, dict[str, list[str]]]:
    def split(tests: list[str]) -> dict[str, list[str]]:
        return {"success": [t for t in tests if status.get(t) == "PASSED"],
                "failure": [t for t in tests if status.get(t) != "PASSED"]}

    return {"FAIL_TO_PASS": split(f2p), "PASS_TO_PASS": split(p2p)}


async def grade(g: GradeContext) -> GradeResult:
    sandbox, task, log = g.sandbox, g.task, g.log
    result = GradeResult(log_path=g.log_path)
    wd, tmp = sandbox.workdir, f"{sandbox.tmpdir}/swe_pro"
    base = shlex.quote(g.base_ref)
    reset = await sandbox.exec(f"git reset -q --hard {base} && git checkout -q {base}", timeout=g.timeout, cwd=wd,
                               lost="rerun")
    log += ["$ reset to base", reset.stdout, reset.stderr]
    if not await apply_patch(sandbox, g.patch, f"{tmp}/patch.diff", result, log, g.timeout, cwd=wd):
        return result
    if not await keep_code_only(g, result, g.base_ref, cwd=wd):  # reset above: the snapshot is the base
        return result

    setup = last_command(task.before_repo_set_cmd or "")
    if setup:
        res = await sandbox.exec(setup, timeout=g.timeout, cwd=wd)
        log += [f"$ {setup}", res.stdout, res.stderr]
        if not res.ok:
            result.stop = Stop(FailureClass.TEST_SETUP_FAILED, f"the last line of before_repo_set_cmd failed "
                                                               f"(exit {res.exit_code}): {res.stderr.strip()[-200:]}")
            return result
    await sandbox.upload_files({f"{tmp}/run_script.sh": ((task.run_script or "").encode("utf-8"), 0o755),
                                f"{tmp}/parser.py": ((task.parser_script or "").encode("utf-8"), 0o755)})
    files = shlex.quote(",".join(task.selected_test_files))
    out, err, output_json = f"{tmp}/stdout.log", f"{tmp}/stderr.log", f"{tmp}/output.json"
    status: dict[str, str] | None = None
    conclusive = False
    channel: verdict.Channel | None = None
    for attempt in range(g.cfg.grading.inconclusive_retries + 1):
        command = f"bash {tmp}/run_script.sh {files} > {out} 2> {err}"
        if g.cfg.grading.tampering != "log_only":  # a new channel per run: its recorder ends with the run
            channel = verdict.Channel.new(sandbox.tmpdir)
            await channel.install(sandbox)
            if verdict.runs_pytest(task.run_script or ""):  # the test user where the channel answers
                command = (f"{channel.exports()}\n{channel.prologue(sandbox.workdir, None, sandbox.separate_users)}\nsbv_as_tests {command}\n"
                           f"sbv_s=$?\n{channel.epilogue(sandbox.workdir)}\nexit $sbv_s")
            else:
                command = f"{channel.exports()}\n{command}"
        run = await sandbox.exec(command, timeout=g.timeout, cwd=wd)
        result.test_exit_code = None if run.timed_out else run.exit_code
        parsed = await sandbox.exec(f"rm -f {output_json}; python {tmp}/parser.py {out} {err} {output_json}",
                                    timeout=g.timeout, cwd=wd, lost="rerun")
        log += [f"$ run_script.sh (attempt {attempt + 1}): exit {run.exit_code}{' (timed out)' if run.timed_out else ''}",
                f"$ parser.py: exit {parsed.exit_code}", parsed.stdout, parsed.stderr]
        try:
            status = parse_output(await sandbox.download(output_json))
        except Exception:  # noqa: BLE001 - a missing output.json is an inconclusive run
            status = None
        conclusive = bool(status) and not run.timed_out
        if conclusive:
            break
    output = []
    for name in (out, err):
        try:
            output.append((await sandbox.download(name)).decode("utf-8", "replace"))
        except Exception:  # noqa: BLE001
            continue
        log += [f"--- {name.rsplit('/', 1)[-1]}", output[-1]]
    if not conclusive or not status:
        result.stop = Stop(FailureClass.TESTS_INCONCLUSIVE)
        return result
    result.tests_ran = True
    result.test_results = dict(status)
    # run_script's exit status is the instance script's, not a runner's (it may end `|| true`)
    checked = result.found(await defences.settle(channel, sandbox, "\n".join(output), status, None,
                                                 {*task.fail_to_pass, *task.pass_to_pass},
                                                 verdict.runs_pytest(task.run_script or ""), lambda seen: seen,
                                                 touched=frozenset(tamper.touched_paths(g.patch))), log)
    result.tests_status = compare(checked.recount(status), task.fail_to_pass, task.pass_to_pass)
    result.passed = not result.tests_status["FAIL_TO_PASS"]["failure"] and \
        not result.tests_status["PASS_TO_PASS"]["failure"]
    return result
