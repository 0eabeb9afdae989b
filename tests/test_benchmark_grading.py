"""Grading end to end with the local provider: the real grade/patch/sandbox steps, fresh
sandboxes, the swebench package's eval scripts, parsers and comparison; SWE-bench Pro's
run_script/parser.py; Terminal-Bench's verifier and reward files."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sandbatch import REPO_ROOT
from sandbatch.core import config
from sandbatch.core.errors import InfraError
from sandbatch.core.failures import FailureClass
from sandbatch.grading import swebench as swe_grader
from sandbatch.contracts.records import (GRADE, HARNESS, PATCH, PATCH_INFO, SANDBOX, GradeRecord, HarnessRecord,
                                       PatchRecord, SandboxRecord, load)
from sandbatch.sandbox import get_provider
from sandbatch.steps.common import StepContext, main, run_step
from sandbatch.steps.grade import GradeStep
from sandbatch.steps.patch import PatchStep
from sandbatch.steps.sandbox import SandboxStep
from sandbatch.tasks import get_task, load_tasks

FIX = REPO_ROOT / "tests" / "fixtures" / "bench"
SMOKE = REPO_ROOT / "data" / "smoke" / "tasks.jsonl"


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def make_cfg(tmp_path: Path, kind: str, tasks: Path, **over) -> Path:
    overrides = {"run": "t", "results_dir": str(tmp_path / "results"), "retries": 0,
                 "benchmark": {"kind": kind, "tasks": str(tasks)},
                 "sandbox": {"provider": "local", "local": {"root": str(tmp_path / "sb")}}}
    for key, value in over.items():
        overrides.setdefault(key, {}).update(value) if isinstance(value, dict) else overrides.update({key: value})
    cfg = config.load([], overrides, default=REPO_ROOT / "config" / "default.yaml")
    path = tmp_path / "run.json"
    path.write_text(cfg.model_dump_json(), encoding="utf-8")
    return path


def ctx_for(cfg_path: Path, task_id: str) -> StepContext:
    return StepContext(cfg_path, task_id, 0, 1, 1)


def grade(cfg_path: Path, task_id: str, patch: str) -> GradeRecord:
    """Write the patch step's outputs for `patch`, run the real grade step, return grade.json."""
    ctx = ctx_for(cfg_path, task_id)
    ctx.path(PATCH).parent.mkdir(parents=True, exist_ok=True)
    ctx.path(PATCH).write_text(patch, encoding="utf-8")
    PatchRecord(bytes=len(patch), empty=not patch.strip(), sandbox_deleted=True).save(ctx.path(PATCH_INFO))
    asyncio.run(run_step(GradeStep(ctx)))
    return load(GradeRecord, ctx.path(GRADE))


def sandboxes_left(tmp_path: Path) -> list[Path]:
    root = tmp_path / "sb"
    return sorted(root.iterdir()) if root.exists() else []


def make_patch(repo_dir: str, tmp_path: Path, edits: dict[str, tuple[str, str]]) -> str:
    """A git diff of `repo_dir` after replacing old -> new in each file (what an agent would leave)."""
    work = tmp_path / "edit"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(repo_dir, work, ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=work, check=True)
    subprocess.run([*git, "add", "-A"], cwd=work, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=work, check=True)
    for name, (old, new) in edits.items():
        text = (work / name).read_text()
        assert old in text, (name, old)
        (work / name).write_text(text.replace(old, new))
    return subprocess.run(["git", "diff"], cwd=work, check=True, capture_output=True, text=True).stdout


# --- SWE-bench family (smoke rows) through the swebench package -------------------------

@pytest.fixture
def smoke(tmp_path):
    cfg_path = make_cfg(tmp_path, "smoke", SMOKE)
    task = get_task(config.Config.model_validate_json(cfg_path.read_text()).benchmark, "smoke__calc-1")
    return cfg_path, task


def test_plan_uses_the_swebench_pytest_parser(smoke):
    _, task = smoke
    p = swe_grader.plan(task, "/testbed", "abc123")
    assert p.parser.__module__ == "swebench.harness.log_parsers.python" and p.parser.__name__ == "parse_log_pytest"
    assert ": '>>>>> Start Test Output'" in p.script and "SANDBATCH_TEST_EXIT_CODE=$?" in p.script
    assert "git checkout -q abc123 -- tests/test_calc.py" in p.script


def test_swebench_gold_resolves(smoke, tmp_path):
    cfg_path, task = smoke
    rec = grade(cfg_path, task.id, task.patch)
    assert rec.status == "ok" and rec.resolved and rec.reward == 1.0, rec
    assert rec.tests_ran and rec.test_exit_code == 0 and rec.apply_method == "git_apply"
    assert rec.tests_status["FAIL_TO_PASS"] == {"success": ["tests/test_calc.py::test_divide"], "failure": []}
    assert rec.report["patch_successfully_applied"] and rec.report["resolved"]
    assert "PASSED tests/test_calc.py::test_divide" in Path(rec.log_path).read_text()
    assert sandboxes_left(tmp_path) == []  # the grading sandbox is deleted


def test_swebench_empty_patch_is_not_run(smoke, tmp_path):
    cfg_path, task = smoke
    rec = grade(cfg_path, task.id, "")
    assert rec.patch_empty and rec.failure_class == "empty_patch" and not rec.resolved and not rec.tests_ran
    assert rec.report["patch_exists"] is False and not (tmp_path / "sb").exists()


def test_swebench_wrong_patch_is_unresolved(smoke):
    cfg_path, task = smoke
    wrong = json.loads((REPO_ROOT / "tests" / "fixtures" / "smoke_wrong_gold.jsonl").read_text())["patch"]
    rec = grade(cfg_path, task.id, wrong)
    assert rec.status == "ok" and rec.patch_applied and rec.tests_ran and not rec.resolved and rec.reward == 0.0
    assert rec.tests_status["FAIL_TO_PASS"]["failure"] == ["tests/test_calc.py::test_divide"]
    assert rec.test_exit_code == 1


def test_swebench_patch_touching_tests_is_reset(smoke, tmp_path):
    cfg_path, task = smoke
    cheat = {"tests/test_calc.py": ("assert divide(8, 2) == 4", "assert True")}
    # a wrong fix plus a test edit that would hide it: the tests are reset, so unresolved
    wrong_and_cheat = make_patch(task.repo_dir, tmp_path, {"calc.py": ("a // b", "round(a / b)"), **cheat})
    rec = grade(cfg_path, task.id, wrong_and_cheat)
    assert rec.patch_applied and rec.tests_ran and not rec.resolved, rec
    # the right fix plus the same test edit: still graded on the real tests, resolved
    gold_and_cheat = make_patch(task.repo_dir, tmp_path, {"calc.py": ("a // b", "a / b"), **cheat})
    rec = grade(cfg_path, task.id, gold_and_cheat)
    assert rec.resolved and rec.tests_status["PASS_TO_PASS"]["failure"] == [], rec


def test_swebench_patch_that_does_not_apply(smoke):
    cfg_path, task = smoke
    bad = task.patch.replace("return a // b", "return a %% b")
    rec = grade(cfg_path, task.id, bad)
    assert rec.patch_applied is False and rec.failure_class == "patch_apply_failed" and not rec.resolved


def test_an_apply_killed_without_a_word_is_an_infra_error_not_the_patch(smoke, monkeypatch):
    """The apply's shell dies silently (as an exec killed under load does): the gold patch is not
    scored patch_apply_failed with reward 0; the grade is an infrastructure error, retried."""
    from sandbatch.grading.apply import MARK
    from sandbatch.sandbox.local import LocalSandbox

    real_exec = LocalSandbox.exec

    async def killed_apply(self, command, **kw):
        if MARK in command:  # the apply script: its shell is SIGKILLed before it prints a line
            command = "kill -KILL $$; " + command
        return await real_exec(self, command, **kw)

    monkeypatch.setattr(LocalSandbox, "exec", killed_apply)
    cfg_path, task = smoke
    with pytest.raises(InfraError) as err:
        grade(cfg_path, task.id, task.patch)
    assert err.value.failure_class == FailureClass.SANDBOX_EXEC and "printed nothing" in str(err.value)
    # on the last attempt the step records an infra error, never the patch's failure
    assert main(GradeStep, ["--config", str(cfg_path), "--task", task.id, "--repeat", "0"]) == 0
    rec = load(GradeRecord, ctx_for(cfg_path, task.id).path(GRADE))
    assert rec.status == "infra_error" and rec.failure_class == FailureClass.SANDBOX_EXEC, rec
    assert not rec.patch_applied and not rec.resolved


def test_swebench_suite_that_never_ran(tmp_path):
    row = json.loads(SMOKE.read_text().splitlines()[0])
    row["repo_dir"] = str((SMOKE.parent / row["repo_dir"]).resolve())
    row["test_cmd"] = "echo 'collected 0 items'; exit 4"
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(row) + "\n")
    cfg_path = make_cfg(tmp_path, "smoke", tasks)
    rec = grade(cfg_path, "smoke__calc-1", row["patch"])
    assert not rec.tests_ran and not rec.resolved and rec.failure_class == "tests_did_not_run"
    assert rec.test_exit_code == 4


def test_classic_rows_get_the_package_eval_script():
    tasks = {t.instance_id: t for t in load_tasks(config.load([], {"benchmark": {
        "kind": "swebench", "tasks": str(FIX / "swebench_verified.jsonl")}},
        default=REPO_ROOT / "config" / "default.yaml").benchmark)}
    p = swe_grader.plan(tasks["astropy__astropy-12907"], "/testbed", "HEAD")
    assert "conda activate testbed" in p.script and "pytest -rA" in p.script
    assert "git checkout d16bfe05a744909de4b27f5875fe0d4ed41ce607 astropy/modeling/tests/test_separable.py" in p.script
    assert p.parser.__name__ == "parse_log_pytest_v2" and p.eval_type == "pass_and_fail"
    p = swe_grader.plan(tasks["django__django-11099"], "/testbed", "HEAD")
    log = ("+ : '>>>>> Start Test Output'\n"
           "test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests) ... ok\n"
           "+ : '>>>>> End Test Output'\n")
    status, found = swe_grader.parse_log(log, p)
    assert found and status == {"test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)": "PASSED"}
    tests_status, resolved = swe_grader.report(status, p)
    assert resolved and tests_status["FAIL_TO_PASS"]["success"]
    u = swe_grader.plan(tasks["example__ünïcode-7"], "/testbed", "HEAD")  # the row's own script
    assert "pytest -rA tests/test_a.py\nSANDBATCH_TEST_EXIT_CODE=$?" in u.script
    assert u.parser.__name__ == "parse_log_pytest"


def test_multilingual_rows_get_the_package_eval_script():
    tasks = {t.instance_id: t for t in load_tasks(config.load([], {"benchmark": {
        "kind": "swebench_multilingual", "tasks": str(FIX / "swebench_multilingual.jsonl")}},
        default=REPO_ROOT / "config" / "default.yaml").benchmark)}
    p = swe_grader.plan(tasks["gin-gonic__gin-4003"], "/testbed", "HEAD")
    assert 'go test . -v -run "TestMethodNotAllowedNoRoute"' in p.script and p.parser.__name__ == "parse_log_gotest"
    log = "+ : '>>>>> Start Test Output'\n--- PASS: TestMethodNotAllowedNoRoute (0.00s)\n" \
          "--- FAIL: TestRouterMethod (0.00s)\n+ : '>>>>> End Test Output'\n"
    status, _ = swe_grader.parse_log(log, p)
    tests_status, resolved = swe_grader.report(status, p)
    assert not resolved and tests_status["PASS_TO_PASS"]["failure"] == ["TestRouterMethod"]
    unknown = tasks["redis__redis-13115"].model_copy(update={"version": "0.0"})
    with pytest.raises(swe_grader.Unsupported, match="no spec for repo 'redis/redis' version '0.0'"):
        swe_grader.plan(unknown, "/testbed", "HEAD")


# --- SWE-bench Pro ------------------------------------------------------------------------

@pytest.fixture
def pro(tmp_path):
    cfg_path = make_cfg(tmp_path, "swebench_pro", FIX / "swe_pro" / "tasks.jsonl")
    task = get_task(config.Config.model_validate_json(cfg_path.read_text()).benchmark,
                    "instance_greeter__greeter-0001")
    return cfg_path, task


def test_pro_gold_resolves(pro, tmp_path):
    cfg_path, task = pro
    rec = grade(cfg_path, task.id, task.patch)
    assert rec.status == "ok" and rec.resolved and rec.reward == 1.0, Path(rec.log_path).read_text()
    assert rec.test_results == {"tests/test_greet.py::test_greet_returns_str": "PASSED",
                                "tests/test_greet.py::test_greet_punctuation": "PASSED"}
    assert sandboxes_left(tmp_path) == []


def test_pro_wrong_patch_and_test_tampering(pro, tmp_path):
    cfg_path, task = pro
    wrong = make_patch(task.repo_dir, tmp_path, {
        "greeter/greet.py": ('"Hello " + name', '"Hello, " + name'),
        "tests/test_greet.py": ('"Hello, Ada!"', '"Hello, Ada"')})  # the last setup line restores the test
    rec = grade(cfg_path, task.id, wrong)
    assert rec.tests_ran and not rec.resolved, rec
    assert rec.tests_status["FAIL_TO_PASS"]["failure"] == ["tests/test_greet.py::test_greet_punctuation"]
    assert rec.tests_status["PASS_TO_PASS"]["success"] == ["tests/test_greet.py::test_greet_returns_str"]


def test_pro_inconclusive_runs_are_retried(tmp_path):
    row = json.loads((FIX / "swe_pro" / "tasks.jsonl").read_text())
    row["repo_dir"] = str((FIX / "swe_pro" / row["repo_dir"]).resolve())
    row["run_script"] = (FIX / "swe_pro/run_scripts/instance_greeter__greeter-0001/run_script.sh").read_text()
    row["parser_script"] = "import sys\nprint('crashed before writing', sys.argv[3])\nsys.exit(1)\n"
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(row) + "\n")
    cfg_path = make_cfg(tmp_path, "swebench_pro", tasks, grading={"inconclusive_retries": 2})
    rec = grade(cfg_path, row["instance_id"], row["patch"])
    assert rec.failure_class == "tests_inconclusive" and not rec.resolved and not rec.tests_ran
    log = Path(rec.log_path).read_text()
    assert "(attempt 3)" in log and "(attempt 4)" not in log


# --- Terminal-Bench -----------------------------------------------------------------------

def agent_sandbox(cfg_path: Path, task_id: str):
    """Run the real sandbox step; return the live agent sandbox (as an agent would see it)."""
    ctx = ctx_for(cfg_path, task_id)
    asyncio.run(run_step(SandboxStep(ctx)))
    handle = load(SandboxRecord, ctx.path(SANDBOX))
    HarnessRecord(harness="none", exit_code=0).save(ctx.path(HARNESS))
    cfg = config.Config.model_validate_json(cfg_path.read_text())
    return ctx, asyncio.run(get_provider(cfg.sandbox).connect(handle.sandbox_id, handle.spec))


def write(sandbox, path: str, text: str) -> None:
    asyncio.run(sandbox.upload(sandbox.map_path(path), text.encode()))


def finish(ctx: StepContext) -> GradeRecord:
    asyncio.run(run_step(PatchStep(ctx)))
    asyncio.run(run_step(GradeStep(ctx)))
    return load(GradeRecord, ctx.path(GRADE))


@pytest.mark.parametrize("in_agent_sandbox", [True, False])
def test_tb_prewritten_reward_does_not_count(tmp_path, in_agent_sandbox):
    cfg_path = make_cfg(tmp_path, "terminal_bench", FIX / "terminal_bench",
                        grading={"in_agent_sandbox": in_agent_sandbox})
    ctx, sb = agent_sandbox(cfg_path, "hello-world")
    # the agent does not solve the task, but plants a reward, a verifier of its own, and a
    # reward file in the workdir (which the replayed diff carries into a fresh sandbox)
    write(sb, "/logs/verifier/reward.txt", "1\n")
    write(sb, "/tests/test.sh", "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\n")
    write(sb, "/app/logs/verifier/reward.txt", "1\n")
    assert (Path(sb.map_path("/logs/verifier/reward.txt"))).read_text() == "1\n"
    rec = finish(ctx)
    assert rec.status == "ok" and rec.reward == 0.0 and not rec.resolved, rec
    assert rec.report["in_agent_sandbox"] is in_agent_sandbox and rec.report["reward_txt"] == "0"
    assert load(PatchRecord, ctx.path(PATCH_INFO)).sandbox_deleted is (not in_agent_sandbox)
    assert sandboxes_left(tmp_path) == []  # the grade step deletes the agent's sandbox too


@pytest.mark.parametrize("in_agent_sandbox", [True, False])
def test_tb_solved_task_scores_one(tmp_path, in_agent_sandbox):
    cfg_path = make_cfg(tmp_path, "terminal_bench", FIX / "terminal_bench",
                        grading={"in_agent_sandbox": ["hello-world"] if in_agent_sandbox else False})
    ctx, sb = agent_sandbox(cfg_path, "hello-world")
    write(sb, "/app/hello.txt", "Hello, world!\n")
    rec = finish(ctx)
    assert rec.reward == 1.0 and rec.resolved and rec.tests_ran, rec
    if not in_agent_sandbox:
        assert rec.apply_method == "git_apply"  # the workdir diff was replayed


def test_tb_reward_json_and_mapped_workdir(tmp_path):
    cfg_path = make_cfg(tmp_path, "terminal_bench", FIX / "terminal_bench")
    ctx, sb = agent_sandbox(cfg_path, "json-reward")
    assert sb.map_path("/workspace/status.txt") == f"{sb.workdir}/status.txt"
    write(sb, "/workspace/status.txt", "done\n")
    rec = finish(ctx)
    assert rec.reward == 1.0 and rec.report["reward_json"] == {"reward": 1, "checks_passed": 1}


def test_tb_missing_reward_is_a_grading_error(tmp_path):
    cfg_path = make_cfg(tmp_path, "terminal_bench", FIX / "terminal_bench")
    ctx, _ = agent_sandbox(cfg_path, "no-reward")
    asyncio.run(run_step(PatchStep(ctx)))
    with pytest.raises(InfraError) as err:
        asyncio.run(run_step(GradeStep(ctx)))
    assert err.value.failure_class == "grading_no_reward"
    # on the last attempt the step records it as an infra error, not as a 0
    argv = ["--config", str(cfg_path), "--task", "no-reward", "--repeat", "0"]
    assert main(GradeStep, argv) == 0
    rec = load(GradeRecord, ctx.path(GRADE))
    assert rec.status == "infra_error" and rec.failure_class == "grading_no_reward"
    assert sandboxes_left(tmp_path) == []


def test_an_infra_error_grading_in_the_agents_sandbox_ends_its_attempts_with_its_first_cause(tmp_path):
    """Graded in the agent's sandbox, an attempt that fails takes the sandbox with it: a second
    attempt could only find it gone. So the first attempt's failure is the record, with what
    redoes the rollout, however many attempts the run allows."""
    cfg_path = make_cfg(tmp_path, "terminal_bench", FIX / "terminal_bench", grading={"in_agent_sandbox": True})
    ctx, _ = agent_sandbox(cfg_path, "no-reward")
    asyncio.run(run_step(PatchStep(ctx)))
    argv = ["--config", str(cfg_path), "--task", "no-reward", "--repeat", "0", "--attempt", "1", "--max-attempts", "3"]
    assert main(GradeStep, argv) == 0
    rec = load(GradeRecord, ctx.path(GRADE))
    assert (rec.status, rec.failure_class, rec.attempt) == ("infra_error", "grading_no_reward", 1), rec
    assert "neither /logs/verifier/reward.json nor reward.txt" in rec.error and "rerun-errors" in rec.error, rec.error
    assert sandboxes_left(tmp_path) == []


@pytest.mark.parametrize("json_data, txt_data, expect", [
    (b'{"reward": 0.5, "x": 1}', b"1", 0.5),
    (b'{"a": 1, "b": 0}', None, 0.5),
    (None, b" 0.25\n", 0.25),
])
def test_read_reward(json_data, txt_data, expect):
    from sandbatch.grading.terminal_bench import read_reward

    assert read_reward(json_data, txt_data)[0] == expect


@pytest.mark.parametrize("json_data, txt_data", [
    (None, None), (None, b"nan"), (None, b"inf"), (None, b"yes"), (b'{"reward": NaN}', None),
    (b'{"reward": "1"}', None), (b"[1]", None), (b"{}", None), (b'{"reward": true}', None),
])
def test_bad_rewards_are_grading_errors(json_data, txt_data):
    from sandbatch.grading.terminal_bench import read_reward

    with pytest.raises(InfraError) as err:
        read_reward(json_data, txt_data)
    assert err.value.failure_class == "grading_no_reward"
