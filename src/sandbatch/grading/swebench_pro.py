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
from ..contracts.records import GradeRecord
from . import GradeContext, defences, tamper, verdict, write_log
from .apply import apply_patch, keep_code_only


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


async def grade(g: GradeContext) -> GradeRecord:
    sandbox, task = g.sandbox, g.task
    rec = GradeRecord(log_path=g.log_path)
    wd, tmp = sandbox.workdir, f"{sandbox.tmpdir}/swe_pro"
    log: list[str] = []
    base = shlex.quote(g.base_ref)
    reset = await sandbox.exec(f"git reset -q --hard {base} && git checkout -q {base}", timeout=g.timeout, cwd=wd)
    log += ["$ reset to base", reset.stdout, reset.stderr]
    if not await apply_patch(sandbox, g.patch, f"{tmp}/patch.diff", rec, log, g.timeout, cwd=wd):
        return rec
    if not await keep_code_only(g, rec, log, g.base_ref, cwd=wd):  # reset above: the snapshot is the base
        return rec

    setup = last_command(task.before_repo_set_cmd or "")
    if setup:
        res = await sandbox.exec(setup, timeout=g.timeout, cwd=wd)
        log += [f"$ {setup}", res.stdout, res.stderr]
        if not res.ok:
            rec.status, rec.failure_class = "infra_error", FailureClass.TEST_SETUP_FAILED
            rec.error = f"the last line of before_repo_set_cmd failed (exit {res.exit_code}): {res.stderr.strip()[-200:]}"
            write_log(g.log_path, log)
            return rec
    await sandbox.upload_files({f"{tmp}/run_script.sh": ((task.run_script or "").encode("utf-8"), 0o755),
                                f"{tmp}/parser.py": ((task.parser_script or "").encode("utf-8"), 0o755)})
    files = shlex.quote(",".join(task.selected_test_files))
    out, err, result = f"{tmp}/stdout.log", f"{tmp}/stderr.log", f"{tmp}/output.json"
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
        rec.test_exit_code = None if run.timed_out else run.exit_code
        parsed = await sandbox.exec(f"rm -f {result}; python {tmp}/parser.py {out} {err} {result}",
                                    timeout=g.timeout, cwd=wd)
        log += [f"$ run_script.sh (attempt {attempt + 1}): exit {run.exit_code}{' (timed out)' if run.timed_out else ''}",
                f"$ parser.py: exit {parsed.exit_code}", parsed.stdout, parsed.stderr]
        try:
            status = parse_output(await sandbox.download(result))
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
    write_log(g.log_path, log)
    if not conclusive or not status:
        rec.failure_class = FailureClass.TESTS_INCONCLUSIVE
        return rec
    rec.tests_ran = True
    rec.test_results = dict(status)
    # run_script's exit status is the instance script's, not a runner's (it may end `|| true`)
    checked = await defences.settle(channel, sandbox, "\n".join(output), status, None,
                                    {*task.fail_to_pass, *task.pass_to_pass},
                                    verdict.runs_pytest(task.run_script or ""), lambda seen: seen,
                                    touched=frozenset(tamper.touched_paths(g.patch)))
    rec.tests_status = compare(status, task.fail_to_pass, task.pass_to_pass)
    rec.resolved = not rec.tests_status["FAIL_TO_PASS"]["failure"] and not rec.tests_status["PASS_TO_PASS"]["failure"]
    rec.report = {"resolved": rec.resolved, "tests_status": rec.tests_status}
    defences.apply(g, rec, checked)
    rec.report["resolved"] = rec.resolved
    return rec
