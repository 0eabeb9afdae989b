"""Attacks from the eval script's build phase (docs/benchmarks.md, "Code that runs before the tests"):
a row whose eval script builds the project after the restore runs the patch's build script before
the tests. Each hostile patch is a wrong fix of smoke__calc-1's divide() plus a `setup.py` the row's
build runs; graded by the real grade step in a Docker sandbox, each earns 1.0 with
`grading.tampering: log_only` and 0.0 with the defences on, flagged; an honest fix whose build
writes its output into the workdir is still resolved with no tampering entry.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from docker_fixtures import docker_base_image, docker_engine  # noqa: F401 (fixtures)
from sandbatch.grading import build_phase
from test_attacks_runtime import WRONG_CALC
from test_benchmark_grading import grade, make_cfg
from test_tampering import PASS_ALL_HOOK, agent_patch
from workflow_util import REPO, SMOKE_TASKS

# the row's eval script, in the two orders real rows have: the build before the tests are placed
# (SWE-bench's Python specs: astropy's `pip install -e .`), or after (compiled languages, `npm run build`)
BUILD = "if [ -f setup.py ]; then python3 setup.py build; fi"
TEST = ": '>>>>> Start Test Output'\npython3 -m pytest -rA -p no:cacheprovider tests/test_calc.py\n" \
       ": '>>>>> End Test Output'"


def _placement(base: str, test_patch: str) -> str:
    return (f"git checkout {base} tests/test_calc.py\ngit apply -v - <<'EOF_114329324912'\n"
            f"{test_patch.rstrip()}\nEOF_114329324912")


def eval_script(order: str, base: str, test_patch: str) -> str:
    place = _placement(base, test_patch)
    steps = [BUILD, place] if order == "build_first" else [place, BUILD]
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", "cd /testbed", "git status", *steps, TEST,
                      f"git checkout {base} tests/test_calc.py"]) + "\n"


# a start-up hook planted in the interpreter's site directory: a .pth line importing a module that
# loads a report-rewriting plugin into every pytest (PYTEST_PLUGINS), ahead of the grader's channel
PLANT_HOOK = f'''import os, site
d = site.getsitepackages()[0]
os.makedirs(d, exist_ok=True)
open(os.path.join(d, "zz_calc_speedups.pth"), "w").write("import _calc_speedups\\n")
open(os.path.join(d, "_calc_speedups.py"), "w").write("import os\\nos.environ['PYTEST_PLUGINS'] = '_calc_plugin'\\n")
open(os.path.join(d, "_calc_plugin.py"), "w").write({PASS_ALL_HOOK!r})
'''
# the placed test file rewritten before it runs: test_divide asserts nothing of divide()
REWRITE_TESTS = '''import re
path = "tests/test_calc.py"
text = open(path).read()
open(path, "w").write(re.sub(r"def test_divide\\(\\):\\n(    .*\\n)+", "def test_divide():\\n    pass\\n", text))
'''
HONEST_BUILD = '''import os
os.makedirs("build", exist_ok=True)
open(os.path.join("build", "calc.txt"), "w").write(open("calc.py").read())
'''


# --- without Docker: where the tests are placed, what is recorded and how it is judged ------------

def test_the_tests_are_placed_before_the_build_and_after_the_setup():
    script = eval_script("build_first", "abc", "diff --git a/tests/test_calc.py b/tests/test_calc.py\n+x\n")
    moved, ok = build_phase.place_first(script, "diff --git a/tests/test_calc.py b/tests/test_calc.py\n+x\n", "/testbed")
    lines = moved.split("\n")
    assert ok
    assert lines.index("git checkout abc tests/test_calc.py") < lines.index(BUILD) < lines.index(TEST.split("\n")[0])
    assert lines.index("git status") < lines.index(build_phase.PLACED)  # after the setup lines
    assert build_phase.place_first(script, "another patch", "/testbed") == (script, False)
    out = build_phase.instrument(moved, "/d", ["tests/test_calc.py"], "/testbed", ">>>>> Start Test Output",
                                 ">>>>> End Test Output").split("\n")
    placed, built, ran = (next(i for i, ln in enumerate(out) if f"/d/files.{p}" in ln) for p in build_phase.POINTS)
    assert out.index(BUILD) in range(placed, built) and placed > lines.index(build_phase.PLACED)
    assert out.index(": '>>>>> End Test Output'") < ran < len(out) - 1


def test_with_nothing_built_between_the_placement_and_the_tests_one_record_stands_for_both():
    """Only setup lines between the placement and the test command: the record before the build would
    hold what the one before the tests holds; it is left out, and the run is judged from the other two."""
    patch = "diff --git a/tests/test_calc.py b/tests/test_calc.py\n+x\n"
    script = eval_script("build_first", "abc", patch).replace(BUILD + "\n", "")
    moved, _ = build_phase.place_first(script, patch, "/testbed")
    out = build_phase.instrument(moved, "/d", ["tests/test_calc.py"], "/testbed", ">>>>> Start Test Output",
                                 ">>>>> End Test Output")
    assert "/d/files.placed" not in out and "/d/startup.placed" not in out
    assert "/d/files.built" in out and "/d/files.ran" in out
    assert build_phase.build_lines(out.split("\n")) is None  # so no build runs as the test user either
    rewritten = {"files.built": ["aa  tests/test_calc.py"], "files.ran": ["bb  tests/test_calc.py"],
                 "startup.built": []}
    found, ok = build_phase.judge(rewritten, {}, set(), True)
    assert not ok and [e["detail"] for e in found] == ["changed during the test run"]


def test_records_are_judged_by_what_changed_between_them():
    same = ["aa  tests/test_calc.py", "absent  tests/conftest.py"]
    hook = ["pth 11 /site/zz.pth", "module 22 /site/_m.py"]
    status = {"tests/test_calc.py::test_divide": "PASSED", "tests/test_calc.py::test_add": "PASSED"}
    clean = {"files.placed": same, "files.built": same, "files.ran": same, "startup.placed": hook,
             "startup.built": list(hook)}
    assert build_phase.judge(clean, dict(status), set(status), True) == ([], True)
    after = ["bb  tests/test_calc.py", "absent  tests/conftest.py"]
    rewritten = dict(clean, **{"files.built": after, "files.ran": after})
    found, ok = build_phase.judge(rewritten, status, {"tests/test_calc.py::test_divide"}, True)
    assert not ok and [(e["path"], e["kind"]) for e in found] == [("tests/test_calc.py", "tests_rewritten")]
    assert status == {"tests/test_calc.py::test_divide": "FAILED", "tests/test_calc.py::test_add": "PASSED"}
    planted = dict(clean, **{"startup.built": [*hook, "custom 33 /site/sitecustomize/__init__.py"]})
    found, ok = build_phase.judge(planted, {}, set(), True)
    assert not ok and [e["kind"] for e in found] == ["startup_hook"]
    conftest = dict(clean, **{"files.ran": ["aa  tests/test_calc.py", "cc  tests/conftest.py"]})
    assert build_phase.judge(conftest, {}, set(), True)[0][0]["detail"] == "changed during the test run"


def test_the_probe_lists_start_up_code_in_any_form_and_runs_none_of_it(tmp_path):
    """The real interpreter, `-I -S` as the grader runs it: a .pth's import line, the module it imports,
    a sitecustomize package and a pytest11 entry point in the user site; a .pth of path lines only is
    not code, and nothing listed ran."""
    site = tmp_path / "home" / ".local" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / "sitecustomize").mkdir(parents=True)
    ran = tmp_path / "ran"
    (site / "sitecustomize" / "__init__.py").write_text(f"open({str(ran)!r}, 'w')\n")
    (site / "hook.pth").write_text(f"import _hook; open({str(ran)!r}, 'w')\n")
    (site / "_hook.py").write_text(f"open({str(ran)!r}, 'w')\n")
    (site / "paths.pth").write_text(f"{tmp_path}\n")
    (site / "plug-1.dist-info").mkdir()
    (site / "plug-1.dist-info" / "entry_points.txt").write_text("[pytest11]\nplug = _plug.hooks\n")
    (site / "_plug").mkdir()
    (site / "_plug" / "__init__.py").write_text("")
    out = subprocess.run([sys.executable, "-I", "-S", str(build_phase.PROBE_SOURCE), str(tmp_path / "home"), ""],
                         capture_output=True, text=True, check=True).stdout
    listed = {(ln.split(" ", 2)[0], ln.split(" ", 2)[2]) for ln in out.splitlines()}
    assert {("pth", str(site / "hook.pth")), ("module", str(site / "_hook.py")),
            ("custom", str(site / "sitecustomize" / "__init__.py")),
            ("entry", str(site / "plug-1.dist-info" / "entry_points.txt")),
            ("entry", str(site / "_plug" / "__init__.py"))} <= listed, out
    assert not any(p == str(site / "paths.pth") for _, p in listed) and not ran.exists()


# --- in Docker: the real grade step on rows that build ------------------------------------------

@pytest.fixture(scope="module")
def calc_image(docker_engine, docker_base_image, tmp_path_factory):  # noqa: F811
    from leaky_repo import build_image

    image = build_image(docker_engine, docker_base_image, tmp_path_factory.mktemp("image"))
    base = subprocess.run([docker_engine, "run", "--rm", image, "git", "-C", "/testbed", "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    return image, base


def _rows(tmp_path: Path, image: str, base: str) -> Path:
    [row] = [json.loads(line) for line in SMOKE_TASKS.read_text().splitlines() if '"smoke__calc-1"' in line]
    rows = []
    for order in ("build_first", "placed_first"):
        rows.append({**{k: v for k, v in row.items() if k not in ("repo_dir", "test_cmd")},
                     "instance_id": f"build__{order}", "image": image, "workdir": "/testbed", "base_commit": base,
                     "log_parser": "parse_log_pytest", "eval_script": eval_script(order, base, row["test_patch"])})
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _grade(tmp_path: Path, tasks: Path, mode: str, task_id: str, patch: str):
    out = tmp_path / f"{mode}-{task_id}"
    out.mkdir()
    cfg = make_cfg(out, "smoke", tasks, grading={"tampering": mode}, sandbox={"provider": "docker"})
    return grade(cfg, task_id, patch)


CALC = str(REPO / "data" / "smoke" / "repos" / "calc")


@pytest.mark.slow
@pytest.mark.parametrize("task_id, build, kind, path", [
    ("build__build_first", PLANT_HOOK, "startup_hook", "zz_calc_speedups.pth"),
    ("build__placed_first", REWRITE_TESTS, None, "tests/test_calc.py"),
], ids=["start-up-hook-planted-in-site-packages", "test-file-rewritten-before-it-runs"])
def test_a_build_script_of_the_patch_earns_nothing(tmp_path, calc_image, task_id, build, kind, path):
    """The build runs as the test user: the site directory is its for the build, so the hook is planted
    and found by the probe; the placed test file is root's, so the rewrite is refused outright (the
    hashes would name it where no test user can be made: test_records_are_judged_...)."""
    tasks = _rows(tmp_path, *calc_image)
    patch, _ = agent_patch(tmp_path, CALC, files={"calc.py": WRONG_CALC, "setup.py": build})
    off = _grade(tmp_path, tasks, "log_only", task_id, patch)
    assert off.reward == 1.0, (off, Path(off.log_path).read_text()[-3000:])
    on = _grade(tmp_path, tasks, "neutralise", task_id, patch)
    log = Path(on.log_path).read_text()
    assert on.status == "ok" and on.reward == 0.0 and not on.resolved, (on, log[-3000:])
    assert on.report["verdict_isolation"] == "separated", on.report
    if kind:
        assert any(t["kind"] == kind and t["path"].endswith(path) for t in on.tampering), on.tampering
    else:  # refused by privilege: the test ran as placed, and failed
        assert f"PermissionError: [Errno 13] Permission denied: '{path}'" in log, log[-3000:]
        assert on.test_results["tests/test_calc.py::test_divide"] == "FAILED", on.test_results


@pytest.mark.slow
def test_an_honest_fix_with_a_build_is_still_resolved(tmp_path, calc_image):
    tasks = _rows(tmp_path, *calc_image)
    gold = json.loads(next(ln for ln in tasks.read_text().splitlines() if "build__build_first" in ln))["patch"]
    fixed = WRONG_CALC.replace("round(a / b)", "a / b")
    patch, _ = agent_patch(tmp_path, CALC, files={"calc.py": fixed, "setup.py": HONEST_BUILD})
    for task_id, p in (("build__build_first", patch), ("build__placed_first", gold)):
        rec = _grade(tmp_path, tasks, "neutralise", task_id, p)
        assert rec.resolved and rec.reward == 1.0 and rec.tampering == [], (rec, Path(rec.log_path).read_text()[-3000:])
        # the tests placed before the build, which ran as the test user and wrote nothing outside the workdir
        assert rec.report["build_phase"] == {"placed_first": True, "records": sorted(build_phase.SECTIONS),
                                             "wrote_outside_workdir": 0}, rec.report



@pytest.mark.slow
def test_where_no_test_user_can_be_made_the_rewritten_test_file_is_named(tmp_path, calc_image, monkeypatch):
    """The same rewrite where the build runs as the grading exec's user (as on the local provider): the
    hashes taken before and after the build name the file, and its test counts as failed."""
    from sandbatch.sandbox.docker.sandbox import DockerSandbox

    monkeypatch.setattr(DockerSandbox, "separate_users", False)
    tasks = _rows(tmp_path, *calc_image)
    patch, _ = agent_patch(tmp_path, CALC, files={"calc.py": WRONG_CALC, "setup.py": REWRITE_TESTS})
    on = _grade(tmp_path, tasks, "neutralise", "build__placed_first", patch)
    assert on.status == "ok" and on.reward == 0.0 and not on.resolved, (on, Path(on.log_path).read_text()[-3000:])
    assert on.report["verdict_isolation"] != "separated", on.report
    assert {"path": "tests/test_calc.py", "kind": "tests_rewritten", "action": "counted_failed",
            "detail": "changed during the build"} in on.tampering, on.tampering
