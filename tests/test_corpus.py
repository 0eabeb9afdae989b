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

import pytest

from docker_fixtures import docker_base_image, docker_engine  # noqa: F401 (fixtures)
from sandbatch import corpus
from sandbatch.corpus.check import MODES, check

pytestmark = pytest.mark.slow

# one row per runner family: pytest's own repository (pytest inside pytest), a plain pytest suite
CI_ROWS = ["pytest-dev__pytest-5262", "pallets__flask-5014"]


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
    assert {r.data["repo"] for r in rows} >= {"pytest-dev/pytest", "pallets/flask"}
    for row in rows:
        d = row.data
        assert {"upstream", "license", "fix_commit", "row"} <= set(d["provenance"]), row.id
        assert (row.dir / d["source"]["archive"]).is_file() if d["source"]["kind"] == "git" else True
        assert "FROM ${BASE}" in (row.dir / "Dockerfile").read_text() and row.image().startswith("sandbatch/corpus:")
        assert d["noop_patch"].startswith("diff --git") and d["noop_patch"] != d["patch"]
        lists = json.loads((row.dir / "lists.json").read_text())
        before, after = lists["before"], lists["after"]
        passed = test_passed if row.kind == "swebench" else lambda t, s: s.get(t) == "PASSED"  # Pro: its parser's PASSED
        assert d["FAIL_TO_PASS"] == sorted(t for t in after if passed(t, after) and not passed(t, before))
        assert d["PASS_TO_PASS"] == sorted(t for t in after if passed(t, after) and passed(t, before))
        assert d["FAIL_TO_PASS"] and (lists.get("swebench") == "4.1.0" or row.kind == "swebench_pro")


def test_corpus_rows_are_graded_right_through_the_workflow(tmp_path, docker_engine, docker_base_image):
    ids = selected()
    res = check(ids, tmp_path / "check")
    assert res["wrong"] == [], "\n".join(res["wrong"])
    for rid in ids:
        for mode in MODES:
            gold, noop = res["grades"][rid][mode]["gold"], res["grades"][rid][mode]["noop"]
            assert gold["resolved"] and gold["reward"] == 1.0 and gold["tampering"] == [], (rid, mode, gold)
            assert not noop["resolved"] and noop["reward"] == 0.0 and noop["status"] == "ok", (rid, mode, noop)
        # with the defences on, the verdict channel answered for the pytest rows
        assert res["grades"][rid]["neutralise"]["gold"]["verdict"] == "ok", rid
    for run in res["runs"]:  # every sandbox of the four runs is gone
        left = subprocess.run([docker_engine, "ps", "-aq", "--filter", f"label=sandbatch.run={run}"],
                              capture_output=True, text=True, check=True).stdout.split()
        assert left == [], run
