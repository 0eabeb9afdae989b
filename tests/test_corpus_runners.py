"""The corpus rows of the runner families beside pytest: Django's own runner (tests/runtests.py)
and a SWE-bench Pro row (its own run_script.sh and parser.py). They
are graded through the real workflow with the pytest rows, in one check
(tests/test_corpus.py::test_corpus_rows_are_graded_right_through_the_workflow).
"""

from __future__ import annotations

from sandbatch import corpus

PRO = "instance_ansible__ansible-11c1777d56664b1acb56b387a1ad6aeadef1391d-v0f01c69f1e2528b935359cfe578530722bca2c59"
# row -> what report.verdict says with the defences on: the pytest verdict channel answers where a
# pytest runs (the Pro row's run_script calls pytest), the unittest channel under Django's runner
RUNNERS = {
    "django__django-11179": "ok",
    PRO: "ok",
}


def test_runner_rows_are_what_their_provenance_says():
    """Without Docker: the rows of each family are there, with the runner their spec names."""
    rows = {r.id: r for r in corpus.rows(list(RUNNERS))}
    assert rows[PRO].kind == "swebench_pro" and rows[PRO].task()["fail_to_pass"] == rows[PRO].data["FAIL_TO_PASS"]
    assert "tests/runtests.py" in rows["django__django-11179"].data["env"]["spec"]["test_cmd"]
    for row in corpus.rows():  # the archive is downloaded when the image is built, never stored
        assert row.data["source"]["kind"] == "release", row.id
        assert "sha256" in row.data["source"]["archive"] and not list(row.dir.glob("*.tar*")), row.id
