"""The corpus rows of the runner families beside a plain pytest suite: pytest's own repository
(nested pytest output in the log), Django's own runner (tests/runtests.py), SymPy's runner
(bin/test), Sphinx through tox (tox-current-env), Jest (immutable-js) and a SWE-bench Pro row (its own
run_script.sh and parser.py). They
are graded through the real workflow with the pytest rows, in one check
(tests/test_corpus.py::test_corpus_rows_are_graded_right_through_the_workflow).
"""

from __future__ import annotations

from sandbatch import corpus

PRO = "instance_ansible__ansible-11c1777d56664b1acb56b387a1ad6aeadef1391d-v0f01c69f1e2528b935359cfe578530722bca2c59"
# row -> what report.verdict says with the defences on: the pytest verdict channel answers where a
# pytest runs (tox runs it in the same environment; the Pro row's run_script calls pytest), the
# unittest channel under Django's runner; SymPy's runner is graded from the log
RUNNERS = {
    "pytest-dev__pytest-5262": "ok",
    "django__django-11179": "ok",
    "sympy__sympy-20590": "not_pytest",
    "sphinx-doc__sphinx-8595": "ok",
    "immutable-js__immutable-js-2006": "not_pytest",  # Jest: its own --json report, a canary in the test file
    PRO: "ok",
}
# rows of a runner family that CI does not run (SANDBATCH_CORPUS=all grades them) -> the same:
# go test and cargo test have no verdict channel, so gin's and tokio's rows are graded from the log (gin's
# decisive passes confirmed each by a process of its own: grading.go_confirm); fmt's googletest under
# ctest from the log, each passed decisive test confirmed by its own process
OUTSIDE_CI = {
    "gin-gonic__gin-3227": "not_pytest",
    "tokio-rs__tokio-7139": "not_pytest",
    "fmtlib__fmt-3158": "not_pytest",
}
VERDICTS = {**RUNNERS, **OUTSIDE_CI}


def test_runner_rows_are_what_their_provenance_says():
    """Without Docker: the rows of each family are there, with the runner their spec names."""
    rows = {r.id: r for r in corpus.rows(list(RUNNERS))}
    assert rows[PRO].kind == "swebench_pro" and rows[PRO].task()["fail_to_pass"] == rows[PRO].data["FAIL_TO_PASS"]
    assert "tests/runtests.py" in rows["django__django-11179"].data["env"]["spec"]["test_cmd"]
    assert "bin/test" in rows["sympy__sympy-20590"].data["env"]["spec"]["test_cmd"]
    assert rows["sphinx-doc__sphinx-8595"].data["env"]["spec"]["test_cmd"].startswith("tox ")
    assert rows["pytest-dev__pytest-5262"].data["repo"] == "pytest-dev/pytest"
    gin = corpus.rows(["gin-gonic__gin-3227"])[0]
    assert gin.data["env"]["spec"]["test_cmd"][0].startswith("go test ") and gin.python is None
    tokio = corpus.rows(["tokio-rs__tokio-7139"])[0]
    assert "cargo test --test fs_file" in tokio.data["env"]["spec"]["test_cmd"][0] and tokio.python is None
    fmt = corpus.rows(["fmtlib__fmt-3158"])[0]
    assert fmt.data["env"]["spec"]["test_cmd"] == ["ctest --test-dir build -V -R ranges-test"] and fmt.python is None
    for row in corpus.rows():  # the archive is downloaded when the image is built, never stored
        assert row.data["source"]["kind"] == "release", row.id
        assert "sha256" in row.data["source"]["archive"] and not list(row.dir.glob("*.tar*")), row.id
