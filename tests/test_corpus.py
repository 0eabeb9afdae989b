"""The corpus of real SWE-bench rows (corpus/README.md) graded right through the real
workflow on Docker: every row's gold patch resolves with no tampering entry and its
comment-only patch does not, with every defence on (the default config) and with
`grading.tampering: log_only`, and the two agree (sandbatch.corpus.check runs the four
real Snakemake runs).

CI runs CI_ROWS, one row per runner family; `SANDBATCH_CORPUS=all` runs every row,
`SANDBATCH_CORPUS=id,id` the rows named. Images are built by the fixture when the engine
lacks them (a fresh machine builds them: scripts need nothing else) and reused otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from docker_fixtures import containers, docker_base_image, docker_engine  # noqa: F401 (fixtures)
from sandbatch import corpus
from sandbatch.corpus.check import MODES, check
from sandbatch.core.instance import read_instance
from test_attacks_runtime import HONEST_LOG, HONEST_STATUS
from test_benchmark_grading import SMOKE, grade, make_cfg
from test_corpus_runners import RUNNERS, VERDICTS

# one row per runner family: a plain pytest suite (requests: its image builds in ~1.5 min) and the
# families beside it (test_corpus_runners.RUNNERS: pytest's own repository, Django's runner,
# SymPy's, Sphinx under tox, a SWE-bench Pro row), all graded in one check (4 Snakemake runs per
# benchmark kind)
CI_ROWS = ["psf__requests-5414", *RUNNERS]


def selected() -> list[str]:
    want = os.environ.get("SANDBATCH_CORPUS", "")
    if want == "all":
        return [r.id for r in corpus.rows()]
    return [i for i in want.split(",") if i] or CI_ROWS


def test_every_row_is_complete_and_its_lists_come_from_swebench():
    """Without Docker: each row has its provenance, a source, a Dockerfile on the local base image,
    a no-op patch, and lists.json agrees with the lists in row.json."""
    from swebench.harness.grading import test_passed

    rows = corpus.rows()
    assert {r.data["repo"] for r in rows} >= {"psf/requests", "django/django"}
    for row in rows:
        d = row.data
        assert {"upstream", "license", "fix_commit", "row"} <= set(d["provenance"]), row.id
        assert "FROM ${BASE}" in (row.dir / "Dockerfile").read_text() and row.image().startswith("sandbatch/corpus:")
        assert d["noop_patch"].startswith("diff --git") and d["noop_patch"] != d["patch"]
        lists = json.loads((row.dir / "lists.json").read_text())
        before, after = lists["before"], lists["after"]
        passed = test_passed if row.kind == "swebench" else lambda t, s: s.get(t) == "PASSED"  # Pro: its parser's PASSED
        assert d["FAIL_TO_PASS"] == sorted(t for t in after if passed(t, after) and not passed(t, before))
        assert d["PASS_TO_PASS"] == sorted(t for t in after if passed(t, after) and passed(t, before))
        assert d["FAIL_TO_PASS"] and (lists.get("swebench") == "4.1.0" or row.kind == "swebench_pro")


# --- the false positives the real rows showed, in small --------------------------------------

# pytest's own suite (pytest 4.5): an outer session whose tests run sessions inside them; their
# headers, counts, failures and -rA lines are printed in the outer session's PASSES section
NESTED_LOG = """============================= test session starts ==============================
collected 3 items

testing/test_x.py ...                                                    [100%]

==================================== PASSES ====================================
____________________________ test_reports_failure ____________________________
----------------------------- Captured stdout call -----------------------------
============================= test session starts ==============================
collected 2 items

test_reports_failure.py .F                                               [100%]
=========================== short test summary info ============================
PASSED test_reports_failure.py::test_ok
FAILED test_reports_failure.py::test_bad - assert 0
====================== 1 failed, 1 passed in 0.02 seconds ======================
_____________________________ test_early_stop ______________________________
----------------------------- Captured stdout call -----------------------------
============================= test session starts ==============================
collected 5 items
!!!!!!!!!!!!!!!!!!!! Interrupted: 1 errors during collection !!!!!!!!!!!!!!!!!!!!
1 passed in 0.01 seconds
=========================== short test summary info ============================
PASSED testing/test_x.py::test_reports_failure
PASSED testing/test_x.py::test_early_stop
PASSED testing/test_x.py::test_plain
=========================== 3 passed in 0.51 seconds ===========================
"""
NESTED_STATUS = {"[100%]": "PASSED", "test_reports_failure.py::test_ok": "PASSED",
                 "test_reports_failure.py::test_bad": "FAILED", "testing/test_x.py::test_reports_failure": "PASSED",
                 "testing/test_x.py::test_early_stop": "PASSED", "testing/test_x.py::test_plain": "PASSED"}


def test_the_specs_python_is_copied_as_a_fresh_build_has_it(tmp_path):
    """The machine's own interpreter may be the pyenv build a row names: what was installed into it
    (distributions, their scripts) stays out of the build context; the interpreter, its standard
    library, pip and setuptools go in."""
    import shutil

    from sandbatch.corpus.build import _not_python

    prefix = tmp_path / "3.11.7"
    site = prefix / "lib" / "python3.11" / "site-packages"
    keep = ["pip", "pip-23.2.1.dist-info", "setuptools", "setuptools-65.5.0.dist-info", "pkg_resources",
            "_distutils_hack", "distutils-precedence.pth", "README.txt"]
    for name in [*keep, "pytest", "pytest-9.0.3.dist-info", "pipdeptree", "_pytest", "numpy", "_sandboxing_ca.pth"]:
        (site / name).mkdir(parents=True)
    (prefix / "lib" / "python3.11" / "json").mkdir()
    for name in ["python", "python3", "python3.11", "python3.11-config", "pip3.11", "pydoc3", "2to3-3.11",
                 "pytest", "py.test", "flask"]:
        (prefix / "bin").mkdir(exist_ok=True)
        (prefix / "bin" / name).write_text("")
    out = tmp_path / "copy"
    shutil.copytree(prefix, out, symlinks=True, ignore=_not_python(prefix))
    assert sorted(p.name for p in (out / "lib" / "python3.11" / "site-packages").iterdir()) == sorted(keep)
    assert (out / "lib" / "python3.11" / "json").is_dir()
    assert sorted(p.name for p in (out / "bin").iterdir()) == ["2to3-3.11", "pip3.11", "pydoc3", "python", "python3",
                                                              "python3.11", "python3.11-config"]


def test_nested_sessions_are_not_the_outer_sessions_counts():
    from sandbatch.grading import log_consistency

    assert log_consistency.check(NESTED_LOG, dict(NESTED_STATUS), 0, 0) == []
    # the outer session cut short is still seen, nested output or not (an inner session printed no
    # fenced summary, so the last one before the cut stands in for the outer's: it counts too few)
    cut = NESTED_LOG.rsplit("=========================== 3 passed", 1)[0]
    assert any("reported 2 of the 3" in e["detail"] for e in log_consistency.check(cut, dict(NESTED_STATUS), 0, 0))
    plain_cut = HONEST_LOG.rsplit("=====", 1)[0].rsplit("\n", 2)[0]
    assert any("without its summary" in e["detail"] for e in log_consistency.check(plain_cut, dict(HONEST_STATUS), 0, 0))
    assert any("reported 2 of the 3" in e["detail"] for e in log_consistency.check(
        NESTED_LOG.replace("= 3 passed in 0.51", "= 2 passed in 0.51"), dict(NESTED_STATUS), 0, 0))
    # and pytest's old "in N seconds" summary is read: failures with exit 0 are caught
    old = HONEST_LOG.replace("in 0.64s", "in 0.64 seconds")
    assert any("exited 0 with 1 failed" in e["detail"] for e in log_consistency.check(old, dict(HONEST_STATUS), 0, 0))


def test_parameter_ids_with_blanks_are_distinct_tests():
    """pylint-8898's comment-only grade: two parameters whose ids hold a blank, one passing and one failing,
    are two tests, not one test that both passed and failed; one id reported both ways still is."""
    from sandbatch.grading import log_consistency as consistency

    ids = ("t.py::test_csv[foo, bar-expected2]", "t.py::test_csv[foo, bar{1,3}-expected3]")
    log = (f"collected 2 items\n\nt.py .F\n=== short test summary info ===\nPASSED {ids[0]}\n"
           f"FAILED {ids[1]} - AssertionError\n=== 1 failed, 1 passed in 0.10s ===\n")
    status = {"t.py::test_csv[foo,": "FAILED"}  # as swebench's parser reads both lines
    assert consistency.check(log, status, 1, 1) == []
    both = log.replace(f"PASSED {ids[0]}", f"PASSED {ids[1]}")
    assert [(e["path"], e["detail"]) for e in consistency.check(both, status, 1, 1)] == [
        (ids[1], "reported both passed and failed")]


def test_names_of_no_collected_file_are_not_the_runners_to_answer_for():
    from sandbatch.grading import verdict

    v = verdict.Verdict("ok", outcomes={"testing/test_x.py::test_plain": "ok",
                                        "testing/test_x.py::test_reports_failure": "ok"},
                        files={"testing", "testing/test_x.py"})
    status = dict(NESTED_STATUS)
    assert verdict.compare(v, True, status, {"[100%]", "testing/test_x.py::test_plain"}, lambda seen: seen) == ([], True)
    # a test of a collected file with no raw call result is still counted failed (a forged line)
    entries, _ = verdict.compare(v, True, status, {"testing/test_x.py::test_early_stop"}, lambda seen: seen)
    assert [(e["path"], e["kind"]) for e in entries] == [("testing/test_x.py::test_early_stop", "report_rewritten")]
    assert status["testing/test_x.py::test_early_stop"] == "FAILED"


def test_an_xfail_test_whose_setup_raised_is_an_expected_failure():
    """psf__requests-5414: an xfail-marked test whose fixture is missing; pytest reports XFAIL."""
    from sandbatch.grading import verdict

    t = "tests/test_requests.py::TestRequests::test_response_iter_lines_reentrant"
    v = verdict.Verdict("ok", outcomes={t: "error", "tests/test_requests.py::test_plain": "error"},
                        expected_failures={t}, files={"tests/test_requests.py"})
    assert verdict.compare(v, True, {t: "XFAIL"}, {t}, lambda seen: seen) == ([], True)
    # without the marker a raised setup is no expected failure
    entries, _ = verdict.compare(v, True, {"tests/test_requests.py::test_plain": "XFAIL"},
                                 {"tests/test_requests.py::test_plain"}, lambda seen: seen)
    assert [e["kind"] for e in entries] == ["report_rewritten"]


def test_a_test_command_without_pytest_needs_no_verdict(tmp_path):
    """A bundled-format task whose test command prints pytest -rA style lines itself (no pytest, as
    in an image without Python): its gold patch resolves, a wrong one does not, no tampering entry."""
    row = json.loads(SMOKE.read_text().splitlines()[0])
    row["repo_dir"] = str((SMOKE.parent / row["repo_dir"]).resolve())
    row["test_cmd"] = ("for t in test_add test_subtract test_divide test_divide_by_zero; do "
                       "if [ $t = test_divide ] && grep -q 'a // b' calc.py; then echo FAILED tests/test_calc.py::$t; "
                       "else echo PASSED tests/test_calc.py::$t; fi; done")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(row) + "\n")
    cfg_path = make_cfg(tmp_path, "smoke", tasks)
    rec = grade(cfg_path, "smoke__calc-1", row["patch"])
    assert rec.resolved and rec.reward == 1.0 and rec.tampering == [] and rec.report["verdict"] == "not_pytest", rec
    rec = grade(cfg_path, "smoke__calc-1", "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n"
                "@@ -1 +1,2 @@\n+# a comment\n " + (SMOKE.parent / row["repo_dir"] / "calc.py").read_text()
                .splitlines()[0] + "\n")
    assert rec.tests_ran and not rec.resolved and rec.tampering == [], rec


# the rows' images are built by whichever corpus test comes first: one after the other (conftest.py)
@pytest.mark.slow
@pytest.mark.xdist_group("corpus")
def test_corpus_rows_are_graded_right_through_the_workflow(tmp_path, docker_engine, docker_base_image):
    ids = selected()
    res = check(ids, tmp_path / "check", cores=4)
    for rid in ids:
        on, off = res["grades"][rid]["neutralise"]["gold"], res["grades"][rid]["log_only"]["gold"]
        print(f"{rid}: build {res['build_s'][rid]} s, tests {on['tests_s']} s (defences on) / "
              f"{off['tests_s']} s (log_only), grade {on['grade_s']} s")
    assert res["wrong"] == [], "\n".join(res["wrong"])
    for rid in ids:
        for mode in MODES:
            gold, noop = res["grades"][rid][mode]["gold"], res["grades"][rid][mode]["noop"]
            assert gold["resolved"] and gold["reward"] == 1.0 and gold["tampering"] == [], (rid, mode, gold)
            assert not noop["resolved"] and noop["reward"] == 0.0 and noop["status"] == "ok", (rid, mode, noop)
        # with the defences on, the verdict channel answered where a pytest ran; the other
        # runners are graded from the log (test_corpus_runners.VERDICTS)
        assert res["grades"][rid]["neutralise"]["gold"]["verdict"] == VERDICTS.get(rid, "ok"), rid
    for run in res["runs"]:  # every sandbox of the four runs is gone
        # this run instance's own: the check's run names are the same in every suite
        results = Path(res["workdir"]) / "results" / run
        left = containers(docker_engine, run=run, instance=read_instance(results))
        assert left == [], run


def test_a_verdict_is_expected_where_the_test_command_starts_pytest_itself():
    """A missing verdict is runner_patched where the command starts pytest (its pytest was kept
    from loading the channel: a pytest.py of the workdir, a forged log); not through tox or a script."""
    from sandbatch.grading import verdict

    for cmd in ("pytest -rA tests/test_x.py", "python -m pytest -rA", "cd /testbed && py.test -x",
                "PYTHONWARNINGS=ignore /usr/bin/pytest --no-header -rA"):
        assert verdict.runs_pytest(cmd), cmd
    for cmd in ("tox --current-env -epy39 -v --", "./tests/runtests.py --verbosity 2", "bin/test -C",
                "bash run_tests.sh", "echo PASSED tests/test_calc.py::test_add", "npx jest"):
        assert not verdict.runs_pytest(cmd), cmd
    missing = verdict.Verdict("missing")
    status = {"tests/test_x.py::test_a": "PASSED"}
    entries, resolvable = verdict.compare(missing, True, dict(status), set(status), lambda seen: seen)
    assert [e["kind"] for e in entries] == ["runner_patched"] and not resolvable
    assert verdict.compare(missing, False, dict(status), set(status), lambda seen: seen) == ([], True)


@pytest.mark.slow
@pytest.mark.xdist_group("corpus")
def test_the_defences_overhead_benchmark_on_a_real_row(docker_engine, docker_base_image):
    """benchmarks/grading_defences.py --corpus at its smallest, as its docstring runs it: one row,
    one repeat; every gold grade resolved clean and both figures printed, the CPU one from the
    sandbox's own container (a figure lost is an error line, not a zero)."""
    import sys

    from sandbatch import REPO_ROOT
    from sandbatch.corpus.build import build

    build(corpus.rows(["psf__requests-5414"])[0])
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "grading_defences.py"), "--corpus",
                           "psf__requests-5414", "--repeats", "1"], capture_output=True, text=True, timeout=900)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no CPU figure" not in proc.stderr, proc.stderr[-3000:]
    cpu = proc.stdout.split("CPU of the grade")[1]
    off, on = (float(x) for x in cpu.split("psf__requests-5414")[1].split()[:2])
    assert 0.5 < off and 0.5 < on, cpu  # a container's CPU, not this process's alone
    assert proc.stdout.count("(target < 5%)") == 2, proc.stdout


def test_the_checks_table_shows_a_grade_that_never_ran_its_tests(monkeypatch, capsys):
    """A gold grade that ended in an infrastructure error before its tests (no `tests` phase) is a
    row of the table and a WRONG line, not a crash of the table."""
    from sandbatch.corpus import check as corpus_check

    def grades(resolved: bool, tests_s: float | None) -> dict:
        return {"resolved": resolved, "reward": 1.0 if resolved else 0.0, "tests_s": tests_s}
    row = {"neutralise": {"gold": grades(True, 44.8), "noop": grades(False, 49.2)},
           "log_only": {"gold": grades(False, None), "noop": grades(False, 82.4)}}
    wrong = ["astropy__astropy-12907 (log_only): the gold patch is not resolved (infra_error, [])"]
    monkeypatch.setattr(corpus_check, "check", lambda *a, **k: {
        "workdir": "/w", "runs": [], "build_s": {"astropy__astropy-12907": None},
        "grades": {"astropy__astropy-12907": row}, "wrong": wrong})
    args = type("Args", (), {"ids": [], "workdir": None, "cores": 2})()
    assert corpus_check.main_args(args) == 1
    out = capsys.readouterr().out
    assert "44.8/-" in out and f"WRONG: {wrong[0]}" in out, out
