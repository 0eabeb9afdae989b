"""Terminal-Bench grading: run the task's verifier and read the reward it writes.

Fresh sandbox (default): the agent's final workdir state (its diff) is replayed into a
new sandbox from the task image. In the agent's own sandbox (grading.in_agent_sandbox):
nothing is replayed. Either way stand-ins for the verifier's tools left in the workdir
go back to the base state (grading.tamper), every reward file is deleted and tests/ is
uploaded only now (the agent never saw it), then `/bin/bash /tests/test.sh` runs in the
workdir with a PATH cleaned of relative (and, in the agent's sandbox, workdir) entries and
the reward is /logs/verifier/reward.json (a dict of numbers: its "reward" entry, else
their mean) or else /logs/verifier/reward.txt (one number). No reward, or a non-finite
one, is a grading error (infra_error, class grading_no_reward), never a 0.

Providers that cannot place files at /tests and /logs (local) map them into the sandbox
(Sandbox.map_path); the uploaded scripts then get those absolute paths rewritten.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

from ..core.errors import InfraError
from ..core.failures import FailureClass
from ..sandbox import Sandbox
from . import GradeContext, tamper, tb_verifier
from .apply import apply_patch, keep_code_only
from .result import Findings, GradeResult

TESTS, LOGS = "/tests", "/logs/verifier"


def _rewriter(sandbox: Sandbox, roots: list[str], moved: dict[str, str] | None = None):
    pairs = [(r, sandbox.map_path(r)) for r in roots]
    pairs = sorted([(r, sandbox.map_path(m)) for r, m in (moved or {}).items()] + pairs, key=lambda p: -len(p[0]))
    pairs = [(r, m) for r, m in pairs if m != r]
    if not pairs:
        return lambda text: text
    rx = re.compile("|".join(rf"(?<![\w./-]){re.escape(r)}(?![\w.-])" for r, _ in pairs))
    table = dict(pairs)
    return lambda text: rx.sub(lambda m: table[m.group(0)], text)


async def upload_dir(sandbox: Sandbox, src: Path, dest: str, workdir: str, moved: dict[str, str] | None = None) -> int:
    """Upload a task directory (tests/, solution/) to `dest` in the sandbox, keeping modes; `moved`:
    absolute paths its scripts name that are rewritten to other places."""
    rewrite = _rewriter(sandbox, ["/logs", TESTS, "/solution", workdir], moved)
    target = sandbox.map_path(dest)
    files = {}
    for f in sorted(p for p in src.rglob("*") if p.is_file()):
        data = f.read_bytes()
        try:
            data = rewrite(data.decode("utf-8")).encode("utf-8")
        except UnicodeDecodeError:
            pass  # binary files go as they are
        files[f"{target}/{f.relative_to(src).as_posix()}"] = (data, f.stat().st_mode & 0o777)
    await sandbox.upload_files(files)
    return len(files)


def read_reward(json_data: bytes | None, txt_data: bytes | None) -> tuple[float, dict]:
    """(reward, details) from reward.json or reward.txt; InfraError when neither holds a finite number."""
    if json_data is not None:
        try:
            doc = json.loads(json_data)
        except ValueError:
            raise InfraError("reward.json is not valid JSON", FailureClass.GRADING_NO_REWARD) from None
        if not isinstance(doc, dict) or not doc or not all(_finite(v) for v in doc.values()):
            raise InfraError(f"reward.json must be a non-empty dict of finite numbers, got {str(doc)[:100]}",
                             FailureClass.GRADING_NO_REWARD)
        reward = doc["reward"] if "reward" in doc else sum(doc.values()) / len(doc)
        return float(reward), {"reward_json": doc}
    if txt_data is not None:
        text = txt_data.decode("utf-8", "replace").strip()
        try:
            value = float(text)
        except ValueError:
            raise InfraError(f"reward.txt does not hold a number: {text[:60]!r}",
                             FailureClass.GRADING_NO_REWARD) from None
        if not math.isfinite(value):
            raise InfraError(f"reward.txt holds a non-finite reward: {text!r}", FailureClass.GRADING_NO_REWARD)
        return value, {"reward_txt": text}
    raise InfraError("the verifier wrote neither /logs/verifier/reward.json nor reward.txt",
                     FailureClass.GRADING_NO_REWARD)


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


async def _files(sandbox: Sandbox, *paths: str) -> list[bytes | None]:
    """Each path's bytes, None where no such file: one command asks which exist."""
    test = "; ".join(f"test -f {shlex.quote(p)} && echo {i}" for i, p in enumerate(paths))
    res = await sandbox.exec(f"{test}; true", timeout=60, lost="rerun")
    found = set(res.stdout.split())
    return [await sandbox.download(p) if str(i) in found else None for i, p in enumerate(paths)]


async def grade(g: GradeContext) -> GradeResult:
    sandbox, task, log = g.sandbox, g.task, g.log
    # the verifier's reward is the benchmark's report, not swebench's resolution
    result = GradeResult(log_path=g.log_path, report_resolution=False)
    wd = sandbox.workdir
    # in the agent's sandbox its changes are there already: what it may not leave goes back to the base
    snap = g.base_ref
    if not g.in_agent_sandbox and g.patch.strip():  # the snapshot in the replay's exec
        applied = await apply_patch(sandbox, g.patch, f"{sandbox.tmpdir}/agent.patch", result, log, g.timeout,
                                    cwd=wd, label="$ replay the agent's workdir changes", snapshot=g.base_ref)
        if not applied:
            return result
        snap = applied.snap
    elif not g.in_agent_sandbox:
        snap = await tamper.snapshot(sandbox, wd, g.timeout, g.base_ref)
    iso = None
    if g.in_agent_sandbox and g.cfg.grading.tampering != "log_only":  # the agent's processes, shell, reward path
        iso = await tb_verifier.prepare(sandbox, "/logs")
        log += [f"$ isolate the verifier: {'; '.join(iso.notes)}"]
        # what the agent left for the verifier's shell: put aside and listed, never a tampered grade
        result.found(Findings(entries=tuple(iso.tampering)))
    if not await keep_code_only(g, result, snap, tools_only=True):
        return result
    tests, logs = sandbox.map_path(TESTS), sandbox.map_path(LOGS)
    # whatever the agent left there (a reward file, tests of its own) goes first
    made = [logs] if iso is None else [logs, sandbox.map_path(iso.logs)]  # and the verifier's own, in one command
    # a few tries: with the defences off nothing stops what the agent left running, and a process that
    # writes into the logs while they are removed makes one `rm -rf` fail ("Directory not empty")
    gone = f"rm -rf {shlex.quote(tests)} {shlex.quote(logs)}"
    clean = await sandbox.exec(f"for _ in 1 2 3 4; do {gone} 2>/dev/null && break; done; "
                               f"{gone} && mkdir -p {shlex.join(made)}", timeout=120, lost="rerun")
    if not clean.ok:
        raise InfraError(f"cannot reset {LOGS} and {TESTS}: {clean.stderr.strip()[-200:]}", FailureClass.SANDBOX_EXEC)
    logs = made[-1]
    n = await upload_dir(sandbox, Path(task.task_dir or "") / "tests", TESTS, task.workdir,
                         {LOGS: iso.logs} if iso else None)
    verifier = tb_verifier.command(iso, tests + "/test.sh", wd) if iso else tamper.verifier_command(
        tests + "/test.sh", wd, g.in_agent_sandbox)
    # its reward is in its files, so a run whose output the transport lost still has its result
    run = await sandbox.exec(verifier, timeout=g.timeout, cwd=wd, lost="wait")
    result.test_exit_code = None if run.timed_out else run.exit_code
    lost = " (the rest of its output was lost in transit; its reward files are read as always)"
    log += [f"$ bash {TESTS}/test.sh ({n} test files): exit {run.exit_code}"
            f"{' (timed out)' if run.timed_out else ''}{lost if run.output_lost else ''}", run.stdout, run.stderr]
    if run.timed_out:  # the reward it wrote before still counts
        result.failure_class = FailureClass.TESTS_TIMEOUT
    reward, details = read_reward(*await _files(sandbox, f"{logs}/reward.json", f"{logs}/reward.txt"))
    result.tests_ran = True
    result.reward = reward
    result.passed = reward >= g.cfg.grading.reward_threshold
    result.report = {"reward": reward, **details, "in_agent_sandbox": g.in_agent_sandbox}
    return result
