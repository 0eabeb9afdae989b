"""Grading that cannot be gamed: a patch that changes how tests are collected, run or reported
is graded on its code change alone (grading.tampering: neutralise) or fails (fail).

The real grade step, the local provider and the swebench package's grader on the smoke
repositories (and a JavaScript one with the real npm test): each attempt below, beside a
wrong fix, scores 0 with the right `tampering` entry, while the honest fix still scores 1.
The attempts in LIVE_EXPLOITS are graded once more with the defences switched off
(grading.tampering: log_only), to show that they would earn 1.0 from the same grader without them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbatch import REPO_ROOT
from sandbatch.core import config
from sandbatch.grading import tamper
from sandbatch.tasks import get_task, load_tasks
from docker_fixtures import containers, docker_base_image, docker_engine  # noqa: F401 (fixtures)
from suite import unique_run
from test_benchmark_grading import FIX, SMOKE, grade, make_cfg, sandboxes_left

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
FIX_DIVIDE = {"calc.py": ("a // b", "a / b")}  # the honest fix of smoke__calc-1
WRONG_DIVIDE = {"calc.py": ("a // b", "round(a / b)")}  # a wrong fix: test_divide still fails

PASS_ALL_HOOK = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""
DESELECT_HOOK = """def pytest_collection_modifyitems(items):
    for item in items:  # every test body becomes a no-op
        item.obj = lambda *a, **k: None
"""
PLUGIN = "pytest_plugins = []\n" + PASS_ALL_HOOK
FAKE_PYTEST = """import sys
for t in ("test_add", "test_subtract", "test_divide", "test_divide_by_zero"):
    print(f"PASSED tests/test_calc.py::{t}")
sys.exit(0)
"""
SITE_HOOK = "import builtins\nbuiltins.__import__('calc_fix')\n"


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def repo_copy(tmp_path: Path, repo_dir: str) -> Path:
    work = tmp_path / "edit"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(repo_dir, work, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    subprocess.run([*GIT, "init", "-q"], cwd=work, check=True)
    subprocess.run([*GIT, "add", "-A"], cwd=work, check=True)
    subprocess.run([*GIT, "commit", "-qm", "base"], cwd=work, check=True)
    return work


def agent_patch(tmp_path: Path, repo_dir: str, edits: dict[str, tuple[str, str]] | None = None,
                files: dict[str, str | bytes | None] | None = None, exe: tuple[str, ...] = ()) -> tuple[str, Path]:
    """(git diff, patched tree) of what an agent leaves: edits old -> new, files written (None: deleted;
    bytes: a binary file, in the diff as a git binary patch)."""
    work = repo_copy(tmp_path, repo_dir)
    for name, (old, new) in (edits or {}).items():
        text = (work / name).read_text()
        assert old in text, (name, old)
        (work / name).write_text(text.replace(old, new))
    for name, text in (files or {}).items():
        if text is None:
            (work / name).unlink()
        else:
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_bytes(text) if isinstance(text, bytes) else (work / name).write_text(text)
    for name in exe:
        (work / name).chmod(0o755)
    subprocess.run([*GIT, "add", "-A"], cwd=work, check=True)
    written = [name for name, text in (files or {}).items() if text is not None]
    if written:  # as an agent can: `git add -f` what the repository ignores (__pycache__/, *.egg-info/)
        subprocess.run([*GIT, "add", "-f", "--", *written], cwd=work, check=True)
    diff = subprocess.run([*GIT, "diff", "--cached", "--binary"], cwd=work, check=True, capture_output=True,
                          text=True).stdout
    return diff, work


@pytest.fixture
def calc(tmp_path):
    cfg_path = make_cfg(tmp_path, "smoke", SMOKE)
    task = get_task(config.Config.model_validate_json(cfg_path.read_text()).benchmark, "smoke__calc-1")
    return cfg_path, task


def test_pass_all_conftest_is_neutralised(calc, tmp_path):
    """The exploit of the issue: only a conftest.py whose makereport hook marks every report passed."""
    cfg_path, task = calc
    patch, tree = agent_patch(tmp_path, task.repo_dir, files={"conftest.py": PASS_ALL_HOOK})
    # left in place, it makes the real pytest pass the task's failing test
    (tree / "tests" / "test_calc.py").write_text((tree / "tests" / "test_calc.py").read_text().replace(
        "assert divide(8, 2) == 4", "assert divide(7, 2) == 3.5"))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=tree,
                         capture_output=True, text=True)
    assert run.returncode == 0 and "4 passed" in run.stdout, run.stdout
    rec = grade(cfg_path, task.id, patch)
    assert rec.status == "ok" and rec.tests_ran and rec.reward == 0.0 and not rec.resolved, rec
    assert rec.tampering == [{"path": "conftest.py", "kind": "runner_hook", "action": "removed"}]
    assert rec.tests_status["FAIL_TO_PASS"]["failure"] == ["tests/test_calc.py::test_divide"]
    assert "SANDBATCH_NEUTRALISED 0 removed" in Path(rec.log_path).read_text()

    # the same hook beside the honest fix: graded on the fix alone, still resolved
    patch, _ = agent_patch(tmp_path, task.repo_dir, edits=FIX_DIVIDE, files={"conftest.py": PASS_ALL_HOOK})
    rec = grade(cfg_path, task.id, patch)
    assert rec.resolved and rec.reward == 1.0 and [t["path"] for t in rec.tampering] == ["conftest.py"], rec

    # grading.tampering: fail -> reward 0, status tampered, the tests are not run
    fail_cfg = make_cfg(tmp_path, "smoke", SMOKE, grading={"tampering": "fail"})
    rec = grade(fail_cfg, task.id, patch)
    assert rec.status == "tampered" and rec.failure_class == "tampering" and rec.reward == 0.0, rec
    assert not rec.resolved and not rec.tests_ran and rec.tampering[0]["path"] == "conftest.py"
    assert sandboxes_left(tmp_path) == []


# each: (files the attempt writes, edits, executables, the expected tampering entries)
ATTEMPTS = {
    "makereport hook in tests/conftest.py": (
        {"tests/conftest.py": PASS_ALL_HOOK}, {}, (), [("tests/conftest.py", "runner_hook", "removed")]),
    "collection hook that empties the tests": (
        {"conftest.py": DESELECT_HOOK}, {}, (), [("conftest.py", "runner_hook", "removed")]),
    "pytest.ini loading a plugin from the workdir": (
        {"pytest.ini": "[pytest]\naddopts = -p calc_plugin\npythonpath = .\n", "calc_plugin.py": PLUGIN}, {}, (),
        [("pytest.ini", "runner_config", "removed")]),
    "pyproject.toml test section loading a plugin": (
        {"calc_plugin.py": PLUGIN}, {"pyproject.toml": ('testpaths = ["tests"]',
                                                        'testpaths = ["tests"]\naddopts = "-p calc_plugin"')}, (),
        [("pyproject.toml", "runner_config", "restored")]),
    "tox.ini pytest section": (
        {"tox.ini": "[pytest]\naddopts = -p calc_plugin\npythonpath = .\n", "calc_plugin.py": PLUGIN}, {}, (),
        [("tox.ini", "runner_config", "removed")]),
    "setup.cfg tool:pytest section": (
        {"setup.cfg": "[metadata]\nname = calc\n\n[tool:pytest]\naddopts = -p calc_plugin\npythonpath = .\n",
         "calc_plugin.py": PLUGIN}, {}, (), [("setup.cfg", "runner_config", "removed")]),
    "edited F2P test": (
        {}, {"tests/test_calc.py": ("assert divide(8, 2) == 4", "return")}, (),
        [("tests/test_calc.py", "test_file", "restored")]),
    "deleted F2P test file": (
        {"tests/test_calc.py": None}, {}, (), [("tests/test_calc.py", "test_file", "restored")]),
    "pytest module shadowing python -m pytest": (
        {"pytest.py": FAKE_PYTEST}, {}, (), [("pytest.py", "shim", "removed")]),
    "pytest executable shim": (
        {"bin/pytest": "#!/bin/sh\necho PASSED\n", "python3": "#!/bin/sh\nexit 0\n"}, {}, ("bin/pytest", "python3"),
        [("bin/pytest", "shim", "removed"), ("python3", "shim", "removed")]),
    ".pth and sitecustomize injection": (
        {"calc_hook.pth": "import calc_fix\n", "sitecustomize.py": SITE_HOOK, "usercustomize.py": SITE_HOOK}, {}, (),
        [("calc_hook.pth", "runner_hook", "removed"), ("sitecustomize.py", "runner_hook", "removed"),
         ("usercustomize.py", "runner_hook", "removed")]),
}


def test_honest_fix_with_a_legit_config_change_keeps_its_reward(calc, tmp_path):
    """A mixed file (pyproject.toml) keeps a change outside its test-runner sections."""
    cfg_path, task = calc
    patch, _ = agent_patch(tmp_path, task.repo_dir, edits={**FIX_DIVIDE, "pyproject.toml": (
        'description = "Small arithmetic helpers"', 'description = "Arithmetic helpers with true division"')})
    rec = grade(cfg_path, task.id, patch)
    assert rec.resolved and rec.reward == 1.0 and rec.tampering == [], rec


def test_bundled_gold_patches_never_trip_it(tmp_path):
    """Every bundled and test row's gold patch touches no protected path; graded, each still resolves."""
    rows = []
    for kind, path in (("smoke", SMOKE), ("smoke", FIX / "tamper" / "tasks.jsonl"),
                       ("swebench", FIX / "swebench_verified.jsonl"),
                       ("swebench_multilingual", FIX / "swebench_multilingual.jsonl"),
                       ("swebench_pro", FIX / "swe_pro" / "tasks.jsonl"), ("smoke", FIX / "django" / "tasks.jsonl")):
        bench = config.load([], {"benchmark": {"kind": kind, "tasks": str(path)}},
                            default=REPO_ROOT / "config" / "default.yaml").benchmark
        rows += [(kind, path, t) for t in load_tasks(bench)]
    assert len(rows) >= 10
    for _, _, task in rows:
        touched = tamper.touched_paths(task.patch)
        assert touched and [p for p in touched if tamper.classify(p, tamper.task_test_files(task))] == [], task.id
        # and the task's own tests are recognised as tests by name alone
        assert all(tamper.classify(p) == "test_file" for p in tamper.touched_paths(task.test_patch)), task.id
    for kind, path, task in rows:
        if kind in ("smoke", "swebench_pro"):  # runnable with the local provider
            rec = grade(make_cfg(tmp_path, kind, path), task.id, task.patch)
            assert rec.resolved and rec.reward == 1.0 and rec.tampering == [], (task.id, rec)


# --- JavaScript: the real npm test / node --test on a bundled repository ---------------------

JS_TASKS = FIX / "tamper" / "tasks.jsonl"
JS_FIX = {"src/mean.js": ("  return xs.reduce", "  if (xs.length === 0) return 0;\n  return xs.reduce")}
JS_WRONG = {"src/mean.js": ("/ xs.length", "/ (xs.length || NaN)")}
TAP_OK = "echo 'ok 1 - mean of numbers'; echo 'ok 2 - mean of nothing is 0'"
PRELOAD_FIX = """const Module = require('module');
const load = Module._load;
Module._load = function (request) {
  const m = load.apply(this, arguments);
  return request.endsWith('/src/mean') ? { mean: (xs) => (xs.length ? m.mean(xs) : 0) } : m;
};
"""
JS_ATTEMPTS = {
    "package.json test script": (
        {}, {"package.json": ('"node --test --test-reporter=tap test/"', json.dumps(TAP_OK))}, (),
        [("package.json", "runner_config", "restored")]),
    ".npmrc preloading a module that fixes the answer": (
        {".npmrc": "node-options=--require ./src/setup.js\n", "src/setup.js": PRELOAD_FIX}, {}, (),
        [(".npmrc", "runner_config", "removed")]),
    "node shim in node_modules/.bin": (
        {"node_modules/.bin/node": f"#!/bin/sh\n{TAP_OK}\n"}, {}, ("node_modules/.bin/node",),
        [("node_modules/.bin/node", "shim", "removed")]),
    "jest config and an edited test": (
        {"jest.config.js": "module.exports = { testMatch: [] };\n"},
        {"test/mean.test.js": ("mean([1, 2, 3]), 2", "2, 2")}, (),
        [("jest.config.js", "runner_config", "removed"), ("test/mean.test.js", "test_file", "restored")]),
}


@pytest.fixture
def mean(tmp_path):
    cfg_path = make_cfg(tmp_path, "smoke", JS_TASKS)
    return cfg_path, get_task(config.Config.model_validate_json(cfg_path.read_text()).benchmark, "tamper__mean-1")


def test_js_gold_resolves_and_wrong_fix_does_not(mean, tmp_path):
    cfg_path, task = mean
    rec = grade(cfg_path, task.id, task.patch)
    assert rec.resolved and rec.reward == 1.0 and rec.tampering == [], Path(rec.log_path).read_text()
    # an honest fix that also bumps the version in package.json keeps its reward
    patch, _ = agent_patch(tmp_path, task.repo_dir, edits={**JS_FIX, "package.json": ('"1.0.0"', '"1.0.1"')})
    rec = grade(cfg_path, task.id, patch)
    assert rec.resolved and rec.tampering == [], rec


# the attempts that earn 1.0 when they are left in place (the others are inert on these tasks)
LIVE_EXPLOITS = {"makereport hook in tests/conftest.py", "collection hook that empties the tests",
                 "pytest.ini loading a plugin from the workdir", "pyproject.toml test section loading a plugin",
                 "pytest module shadowing python -m pytest", "package.json test script",
                 ".npmrc preloading a module that fixes the answer", "node shim in node_modules/.bin"}
assert LIVE_EXPLOITS <= {*ATTEMPTS, *JS_ATTEMPTS}
# per corpus: the task, a wrong fix to pair each attempt with, the F2P test that must still fail
CORPORA = {"python": (SMOKE, "smoke__calc-1", WRONG_DIVIDE, "tests/test_calc.py::test_divide", ATTEMPTS),
           "javascript": (JS_TASKS, "tamper__mean-1", JS_WRONG, "- mean of nothing is 0", JS_ATTEMPTS)}


@pytest.mark.parametrize("corpus, name", [(c, n) for c, spec in CORPORA.items() for n in spec[-1]])
def test_tampering_attempts_score_zero(tmp_path, corpus, name):
    tasks, task_id, wrong, f2p, attempts = CORPORA[corpus]
    cfg_path = make_cfg(tmp_path, "smoke", tasks)
    task = get_task(config.Config.model_validate_json(cfg_path.read_text()).benchmark, task_id)
    files, edits, exe, expect = attempts[name]
    patch, _ = agent_patch(tmp_path, task.repo_dir, edits={**wrong, **edits}, files=files, exe=exe)
    rec = grade(cfg_path, task.id, patch)
    assert rec.status == "ok" and rec.patch_applied and rec.tests_ran and rec.reward == 0.0, rec
    assert sorted(map(tuple, (t.values() for t in rec.tampering))) == sorted(expect), rec.tampering
    assert rec.tests_status["FAIL_TO_PASS"]["failure"] == [f2p]
    if name in LIVE_EXPLOITS:  # with every defence off (grading.tampering: log_only) it earns the reward
        (tmp_path / "off").mkdir()
        assert grade(make_cfg(tmp_path / "off", "smoke", tasks, grading={"tampering": "log_only"}), task.id,
                     patch).reward == 1.0, name


# --- the rules for the other languages and benchmarks (no toolchain needed) -----------------

@pytest.mark.parametrize("path, kind", [
    # Go (SWE-bench Multilingual, Pro)
    ("routes_test.go", "test_file"), ("internal/render/testdata/golden.json", "test_file"), ("go.work", "runner_config"),
    # JS/TS
    ("src/__tests__/app.js", "test_file"), ("src/app.test.ts", "test_file"), ("lib/x.spec.mjs", "test_file"),
    ("jest.config.js", "runner_config"), ("packages/a/vitest.config.mts", "runner_config"),
    (".mocharc.yml", "runner_config"), ("node_modules/.bin/jest", "shim"), ("hooks/test/index.js", "test_file"),
    # Rust, Java, Ruby, PHP, C (redis)
    ("tests/integration.rs", "test_file"), (".cargo/config.toml", "runner_config"),
    ("src/test/java/a/BTest.java", "test_file"), ("spec/models/user_spec.rb", "test_file"),
    ("phpunit.xml.dist", "runner_config"), ("tests/unit/type/string.tcl", "test_file"), ("runtest", "shim"),
    # Python
    ("sub/pkg/conftest.py", "runner_hook"), ("lib/x.pth", "runner_hook"), ("testing/test_main.py", "test_file"),
    ("src/test/helpers.py", "test_file"), ("astropy/io/tests/data/a.fits", "test_file"),
    ("_pytest/main.py", "shim"), ("tools/go", "shim"), (".git/hooks/post-checkout", "runner_hook"),
    ("bin/test", "shim"), (".python-version", "runner_config"),  # sympy's test command; pyenv
    ("features/step_definitions/steps.rb", "test_file"), ("src/features/cart.ts", None),  # cucumber
    ("vendor/phpunit/phpunit/src/TextUI/Command.php", "shim"), ("vendor/bin/phpunit", "shim"),
    ("vendor/github.com/stretchr/testify/assert/assertions.go", "shim"), ("vendor/golang.org/x/net/http2/h2.go", None), (".yarn/releases/yarn.cjs", "shim"),
    ("gradle/wrapper/gradle-wrapper.properties", "runner_config"), (".mvn/extensions.xml", "runner_config"),
    ("babel.config.js", "runner_config"), ("jasmine.json", "runner_config"),
    # code, including packages named like tests
    ("django/test/testcases.py", None), ("sympy/testing/runtests.py", None), ("gin.go", None),
    ("src/t_string.c", None), ("src/_pytest/python.py", None), ("django/contrib/admin/tests.py", None),
    ("lib/contest.py", None), ("pyproject.toml", None), ("package.json", None),
])
def test_classify(path, kind):
    assert tamper.classify(path) == kind


@pytest.mark.parametrize("name, base, new, differs", [
    ("pyproject.toml", '[project]\nname = "a"\n', '[project]\nname = "a"\ndependencies = ["b"]\n', False),
    ("pyproject.toml", '[project]\nname = "a"\n', '[project]\nname = "a"\n[tool.pytest.ini_options]\naddopts = "-p x"\n',
     True),
    ("pyproject.toml", '[project]\nname = "a"\n', '[project.entry-points.pytest11]\nx = "x"\n', True),
    ("pyproject.toml", '[project]\nname = "a"\n', '[project.scripts]\npytest = "x:main"\n', True),
    ("pyproject.toml", '[project]\nname = "a"\n', '[project\n', True),
    ("setup.cfg", "[metadata]\nname = a\n", "[metadata]\nname = b\n", False),
    ("setup.cfg", "[metadata]\nname = a\n", "[metadata]\nname = a\n[tool:pytest]\naddopts = -p x\n", True),
    ("setup.py", "setup(name='a')\n", "setup(name='a', entry_points={'pytest11': ['x = x']})\n", True),
    ("setup.py", "setup(name='a')\n", "setup(name='a', install_requires=['b'])\n", False),
    ("package.json", '{"name": "a", "scripts": {"test": "jest"}}', '{"name": "a", "version": "2", '
     '"scripts": {"test": "jest", "build": "tsc"}}', False),
    ("package.json", '{"scripts": {"test": "jest"}}', '{"scripts": {"test": "true"}}', True),
    ("package.json", '{"jest": {}}', '{"jest": {"setupFiles": ["./x.js"]}}', True),
    ("go.mod", "module a\n\nrequire b v1.0.0\n", "module a\n\nrequire b v1.1.0\n", False),
    ("go.mod", "module a\n\nrequire github.com/stretchr/testify v1.8.0\n",
     "module a\n\nrequire github.com/stretchr/testify v1.8.0\nreplace github.com/stretchr/testify => ./fake\n", True),
    ("go.mod", "module a\n", "module a\nreplace (\n\tgithub.com/x/y v1.0.0 => ../y\n)\n", True),
    ("go.mod", "module a\n", "module a\nreplace github.com/x/y => github.com/z/y v1.0.0\n", False),
    ("Cargo.toml", '[package]\nname = "a"\n', '[package]\nname = "a"\n[[test]]\nname = "t"\nharness = false\n', True),
    ("package.json", None, '{"name": "new-package", "main": "index.js"}', False),
    ("Gemfile", "gem 'rspec'\n", "gem 'rspec'\ngem 'nokogiri', '~> 1.16'\n", False),
    ("Gemfile", "gem 'rspec'\n", "gem 'rspec', path: './fake_rspec'\n", True),
    ("package.json", None, '{"name": "new-package", "scripts": {"test": "true"}}', True),
    ("pyproject.toml", '[tool.pytest.ini_options]\naddopts = "-x"\n', None, True),
])
def test_mixed_files_keep_code_changes(name, base, new, differs):
    assert tamper.runner_parts_differ(name, base, new) is differs


def test_touched_paths_reads_every_header():
    patch = ('diff --git a/old.py b/tests/new.py\nsimilarity index 90%\nrename from old.py\nrename to tests/new.py\n'
             'diff --git "a/t\\303\\251st.py" "b/t\\303\\251st.py"\nnew file mode 100644\n--- /dev/null\n'
             '+++ "b/t\\303\\251st.py"\n@@ -0,0 +1 @@\n+x\n'
             '--- a/plain.py\t2024-01-01\n+++ b/plain.py\t2024-01-01\n@@ -1 +1 @@\n-a\n+b\n'
             'diff --git a/../escape b/../escape\n')
    assert tamper.touched_paths(patch) == ["old.py", "tests/new.py", "tést.py", "plain.py"]


def test_tampering_rate_in_metrics_and_report():
    from sandbatch.contracts.metrics import Rate
    from sandbatch.contracts.row import RolloutRow
    from sandbatch.reporting import metrics, report

    row = dict(run="r", task_id="a", instance_id="a", repeat=0, reward=0.0, resolved=False, status="ok",
               failure_class=None, patch_empty=False, usage={}, tampering=[])
    rows = [RolloutRow(**row),
            RolloutRow(**{**row, "tampering": [{"path": "conftest.py", "kind": "runner_hook", "action": "removed"}]}),
            RolloutRow(**{**row, "status": "tampered", "failure_class": "tampering", "tampering": [{"path": "x"}]})]
    m = metrics.compute(rows, 1.0)
    assert m.tampering_rate == Rate(value=round(2 / 3, 6), numerator=2, denominator=3)
    assert m.status_counts["tampered"] == 1
    assert ("patches that changed tests or test config", "66.7% (2/3)") in report.metric_rows(m)


# --- Terminal-Bench: the verifier's shell and tools are the image's ----------------------------

CAT_SHIM = "#!/bin/sh\necho 'Hello, world!'\n"


@pytest.mark.parametrize("in_agent_sandbox", [False, True])
def test_tb_verifier_ignores_tools_the_agent_left(tmp_path, monkeypatch, in_agent_sandbox):
    """The agent answers wrong and leaves a `cat` that prints the right answer where a PATH with `.`
    (or, in its own sandbox, a workdir directory) finds it, plus a python3 shim: reward 0."""
    from test_benchmark_grading import agent_sandbox, finish, write

    cfg_path = make_cfg(tmp_path, "terminal_bench", FIX / "terminal_bench",
                        grading={"in_agent_sandbox": in_agent_sandbox})
    ctx, sb = agent_sandbox(cfg_path, "hello-world")
    monkeypatch.setenv("PATH", f".:{sb.workdir}/.tools:{os.environ['PATH']}")
    write(sb, "/app/hello.txt", "Goodbye\n")
    for shim in ("/app/cat", "/app/.tools/cat", "/app/python3"):
        write(sb, shim, CAT_SHIM)
        Path(sb.map_path(shim)).chmod(0o755)
    # left alone, the verifier's `cat` is the agent's
    run = subprocess.run(["bash", "-c", "cat hello.txt"], cwd=sb.workdir, capture_output=True, text=True)
    assert run.stdout == "Hello, world!\n"
    rec = finish(ctx)
    assert rec.status == "ok" and rec.tests_ran and rec.reward == 0.0 and rec.report["reward_txt"] == "0", rec
    assert rec.tampering == [{"path": "python3", "kind": "shim", "action": "removed"}]


def test_tb_solved_task_with_a_shim_fails_in_fail_mode(tmp_path):
    from test_benchmark_grading import agent_sandbox, finish, write

    cfg_path = make_cfg(tmp_path, "terminal_bench", FIX / "terminal_bench", grading={"tampering": "fail"})
    ctx, sb = agent_sandbox(cfg_path, "hello-world")
    write(sb, "/app/hello.txt", "Hello, world!\n")
    write(sb, "/app/lib/sitecustomize.py", "print('hi')\n")
    rec = finish(ctx)
    assert rec.status == "tampered" and rec.reward == 0.0 and not rec.tests_ran, rec
    assert rec.tampering == [{"path": "lib/sitecustomize.py", "kind": "runner_hook", "action": "removed"}]


@pytest.mark.parametrize("in_agent_sandbox, expect", [
    (False, ["/work/app/bin", "/work/app", "/usr/bin", "/bin"]), (True, ["/usr/bin", "/bin"])])
def test_verifier_path_drops_relative_and_workdir_entries(tmp_path, in_agent_sandbox, expect):
    script = tmp_path / "v.sh"
    script.write_text('printf "%s\\n" "$PATH"; echo "bash_env=${BASH_ENV:-}"\n')
    env = {"PATH": ".::bin:/work/app/bin:/work/app:/usr/bin:/bin", "BASH_ENV": str(tmp_path / "evil.sh")}
    run = subprocess.run(["/bin/bash", "-c", tamper.verifier_command(str(script), "/work/app/", in_agent_sandbox)],
                         env=env, capture_output=True, text=True, check=True)
    path, bash_env = run.stdout.splitlines()
    assert path.split(":") == expect
    assert bash_env == "bash_env="


# --- end to end: the workflow in containers, rollouts.jsonl, metrics.json, report.md ---------

@pytest.mark.slow
def test_exploit_through_the_workflow_in_containers(tmp_path, docker_engine, docker_base_image):
    """A 'solution' that is only the pass-all conftest.py, applied by the oracle harness in a
    container and graded in a fresh one: reward 0, counted in every output of the run."""
    from workflow_util import rollouts, snakemake, write_config

    rows = [json.loads(line) for line in SMOKE.read_text().splitlines()[:2]]
    for row in rows:
        row["repo_dir"] = str((SMOKE.parent / row["repo_dir"]).resolve())
    exploit, _ = agent_patch(tmp_path, rows[0]["repo_dir"], files={"conftest.py": PASS_ALL_HOOK})
    rows[0]["patch"] = exploit  # the second row keeps its honest gold patch
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = unique_run("tamper")
    cfg = write_config(tmp_path, "run.yaml", {
        "run": run, "retries": 0, "harness": {"name": "oracle"}, "benchmark": {"kind": "smoke", "tasks": str(tasks)},
        "sandbox": {"provider": "docker", "default_image": docker_base_image}})
    proc = snakemake(tmp_path, "--configfile", str(cfg))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = {r["instance_id"]: r for r in rollouts(tmp_path, run)}
    cheat, honest = got["smoke__calc-1"], got["smoke__textutils-1"]
    assert cheat["reward"] == 0.0 and cheat["tests_ran"] and cheat["status"] == "ok", cheat
    assert cheat["tampering"] == [{"path": "conftest.py", "kind": "runner_hook", "action": "removed"}]
    assert honest["reward"] == 1.0 and honest["tampering"] == []
    out = tmp_path / "results" / run
    assert json.loads((out / "metrics.json").read_text())["tampering_rate"] == {
        "value": 0.5, "numerator": 1, "denominator": 2}
    assert "| patches that changed tests or test config | 50.0% (1/2) |" in (out / "report.md").read_text()
    left = containers(docker_engine, run=run)
    assert left == []


def test_pro_pass_all_conftest_and_shadow_module(tmp_path):
    """SWE-bench Pro's run_script runs `python -m pytest` in the workdir: a conftest hook and a
    pytest.py shadow are neutralised there too."""
    pro_tasks = FIX / "swe_pro" / "tasks.jsonl"
    cfg_path = make_cfg(tmp_path, "swebench_pro", pro_tasks)
    task = get_task(config.Config.model_validate_json(cfg_path.read_text()).benchmark, "instance_greeter__greeter-0001")
    fake = "print('tests/test_greet.py::test_greet_punctuation PASSED')\n"
    patch, _ = agent_patch(tmp_path, task.repo_dir, files={"tests/conftest.py": PASS_ALL_HOOK, "pytest.py": fake})
    rec = grade(cfg_path, task.id, patch)
    assert rec.tests_ran and rec.reward == 0.0 and not rec.resolved, rec
    assert rec.tampering == [{"path": "pytest.py", "kind": "shim", "action": "removed"},
                             {"path": "tests/conftest.py", "kind": "runner_hook", "action": "removed"}]
    assert rec.tests_status["FAIL_TO_PASS"]["failure"] == ["tests/test_greet.py::test_greet_punctuation"]


def workdir_shell(cfg_path: Path, task_id: str):
    """(sandbox, sh) of a fresh sandbox of the task, as the agent gets it; sh runs a command in its workdir."""
    import asyncio

    from test_benchmark_grading import agent_sandbox

    _, sb = agent_sandbox(cfg_path, task_id)

    def sh(cmd: str) -> str:
        res = asyncio.run(sb.exec(cmd, timeout=60, cwd=sb.workdir))
        assert res.ok, res.stderr
        return res.stdout

    return sb, sh


def test_restores_the_images_own_state_not_the_base_commit(calc, tmp_path):
    """Task images may edit tracked files at build time (SWE-bench's specs sed tox.ini): what is
    restored is the workdir as it was before the patch. Writes the headers do not name (here
    through a symlink the patch adds) are found from the workdir itself."""
    import asyncio

    cfg_path, task = calc
    sb, sh = workdir_shell(cfg_path, task.id)
    wd = sb.workdir
    try:
        sh("printf '[pytest]\\naddopts = -rA\\n' > pytest.ini && git add pytest.ini && "
           "git -c user.name=t -c user.email=t@t commit -qm ini && sed -i 's/-rA/-rA -q/' pytest.ini")
        base = sh("git rev-parse HEAD").strip()
        snap = asyncio.run(tamper.snapshot(sb, wd, 60, base))
        assert snap != base
        # the agent's patch: pytest.ini rewritten, a symlink to tests/ and a test edited through it
        sh("printf '[pytest]\\naddopts = -p evil\\n' > pytest.ini && ln -s tests t && "
           "sed -i 's/== 4/== 4 or True/' t/test_calc.py && printf 'x = 1\\n' > helper.py")
        patch = ("diff --git a/pytest.ini b/pytest.ini\n--- a/pytest.ini\n+++ b/pytest.ini\n"
                 "diff --git a/t b/t\nnew file mode 120000\n--- /dev/null\n+++ b/t\n"
                 "diff --git a/helper.py b/helper.py\nnew file mode 100644\n--- /dev/null\n+++ b/helper.py\n")
        findings = asyncio.run(tamper.find(sb, patch, snap, wd, 60))
        assert [(f.path, f.kind) for f in findings] == [("pytest.ini", "runner_config"),
                                                        ("tests/test_calc.py", "test_file")]
        log: list[str] = []
        asyncio.run(tamper.restore(sb, findings, snap, wd, 60, log))
        assert [f.action for f in findings] == ["restored", "restored"]
        assert sh("cat pytest.ini") == "[pytest]\naddopts = -rA -q\n"  # the image's edit, kept
        assert "or True" not in sh("cat tests/test_calc.py") and sh("cat helper.py") == "x = 1\n"
    finally:
        asyncio.run(sb.delete())


def test_restores_a_patch_naming_thousands_of_files(calc, tmp_path):
    """A patch that adds more build output than one shell argument holds (a release tree without
    .gitignore: 281 extensions, 125 MB): every file is removed, none left for an infra error."""
    import asyncio

    cfg_path, task = calc
    sb, sh = workdir_shell(cfg_path, task.id)
    wd = sb.workdir
    try:
        base = sh("git rev-parse HEAD").strip()
        snap = asyncio.run(tamper.snapshot(sb, wd, 60, base))
        names = [f"build/lib.linux-x86_64-3.9/pkg/sub{i // 100}/_module_with_a_long_name_{i}.cpython-39.so"
                 for i in range(1500)]
        sh("for d in $(seq 0 14); do mkdir -p build/lib.linux-x86_64-3.9/pkg/sub$d; done && "
           "for i in $(seq 0 1499); do : > build/lib.linux-x86_64-3.9/pkg/sub$((i / 100))/"
           "_module_with_a_long_name_$i.cpython-39.so; done")
        patch = "".join(f"diff --git a/{n} b/{n}\nnew file mode 100644\n--- /dev/null\n+++ b/{n}\n" for n in names)
        findings = asyncio.run(tamper.find(sb, patch, snap, wd, 60))
        assert len(findings) == 1500 and {f.kind for f in findings} == {"runner_hook"}
        asyncio.run(tamper.restore(sb, findings, snap, wd, 60, []))
        assert {f.action for f in findings} == {"removed"} and sh("ls build 2>/dev/null || true") == ""
    finally:
        asyncio.run(sb.delete())


def test_tampering_switch_defaults_to_neutralise_and_rejects_other_values():
    from sandbatch.core.errors import UserError

    default = REPO_ROOT / "config" / "default.yaml"
    assert config.load([], {}, default=default).grading.tampering == "neutralise"
    with pytest.raises(UserError, match=r"grading\.tampering: 'ignore' is not allowed; choose one of: neutralise, fail, "
                                        r"log_only"):
        config.load([], {"grading": {"tampering": "ignore"}}, default=default)
