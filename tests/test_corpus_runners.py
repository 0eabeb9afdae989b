"""The corpus rows of the runner families beside pytest, graded right through the real
workflow on Docker (sandbatch.corpus.check: oracle, gold and comment-only patch, with every
defence on and with `grading.tampering: log_only`): Django's own runner (tests/runtests.py),
SymPy's bin/test, Sphinx through tox (tox-current-env), Jest on a SWE-bench Multilingual
JavaScript/TypeScript row, and a SWE-bench Pro row (its own run_script.sh and parser.py).

Images are built by check() when the engine lacks them and reused otherwise; the build
seconds and each row's test-run seconds are printed (`pytest -s` shows them).
"""

from __future__ import annotations

import subprocess

import pytest

from docker_fixtures import docker_base_image, docker_engine  # noqa: F401 (fixtures)
from sandbatch import corpus
from sandbatch.corpus.check import MODES, check

pytestmark = pytest.mark.slow

PRO = "instance_ansible__ansible-11c1777d56664b1acb56b387a1ad6aeadef1391d-v0f01c69f1e2528b935359cfe578530722bca2c59"
# row -> what report.verdict says with the defences on: the pytest verdict channel answers where a
# pytest runs (tox runs it in the same environment; the Pro row's run_script calls pytest), the
# other runners are graded from the log
RUNNERS = {
    "django__django-11179": "not_pytest",
    "sympy__sympy-20590": "not_pytest",
    "sphinx-doc__sphinx-8595": "ok",
    "immutable-js__immutable-js-2006": "not_pytest",
    PRO: "ok",
}


def test_runner_rows_are_what_their_provenance_says():
    """Without Docker: the rows of each family are there, with the runner their spec names."""
    rows = {r.id: r for r in corpus.rows(list(RUNNERS))}
    assert rows[PRO].kind == "swebench_pro" and rows[PRO].task()["fail_to_pass"] == rows[PRO].data["FAIL_TO_PASS"]
    assert "tests/runtests.py" in rows["django__django-11179"].data["env"]["spec"]["test_cmd"]
    assert "bin/test" in rows["sympy__sympy-20590"].data["env"]["spec"]["test_cmd"]
    assert rows["sphinx-doc__sphinx-8595"].data["env"]["spec"]["test_cmd"].startswith("tox ")
    assert "jest" in rows["immutable-js__immutable-js-2006"].data["env"]["spec"]["test_cmd"][0]
    for row in rows.values():  # release rows: the archive is downloaded when the image is built, never stored
        if row.data["source"]["kind"] == "release":
            assert "sha256" in row.data["source"]["archive"] and not list(row.dir.glob("*.tar*")), row.id


def test_runner_rows_are_graded_right_through_the_workflow(tmp_path, docker_engine, docker_base_image):
    res = check(list(RUNNERS), tmp_path / "check")
    for rid in RUNNERS:
        on, off = res["grades"][rid]["neutralise"]["gold"], res["grades"][rid]["log_only"]["gold"]
        print(f"{rid}: build {res['build_s'][rid]} s, tests {on['tests_s']} s (defences on) / "
              f"{off['tests_s']} s (log_only), grade {on['grade_s']} s")
    assert res["wrong"] == [], "\n".join(res["wrong"])
    for rid, verdict in RUNNERS.items():
        for mode in MODES:
            gold, noop = res["grades"][rid][mode]["gold"], res["grades"][rid][mode]["noop"]
            assert gold["resolved"] and gold["reward"] == 1.0 and gold["tampering"] == [], (rid, mode, gold)
            assert not noop["resolved"] and noop["reward"] == 0.0 and noop["status"] == "ok", (rid, mode, noop)
        assert res["grades"][rid]["neutralise"]["gold"]["verdict"] == verdict, rid
    for run in res["runs"]:  # every sandbox of the runs is gone
        left = subprocess.run([docker_engine, "ps", "-aq", "--filter", f"label=sandbatch.run={run}"],
                              capture_output=True, text=True, check=True).stdout.split()
        assert left == [], run
