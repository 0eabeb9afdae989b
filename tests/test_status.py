"""`sandbatch status` counts what is on disk, and reads no more of a record than it needs."""

import json

import pytest

from ops_util import run, sandbatch
from sandbatch.contracts.records import INDEX, GradeRecord, IndexLine, Record, final_status, read_index, summary


def test_saved_records_are_indexed_and_the_last_line_wins(tmp_path):
    GradeRecord(status="infra_error", failure_class="grader_crash").save(tmp_path / "grade.json")
    GradeRecord(resolved=True, duration_s=1.5, test_results={f"t{i}": "PASSED" for i in range(5000)}).save(
        tmp_path / "grade.json")
    index = read_index(tmp_path)
    assert len((tmp_path / INDEX).read_text().splitlines()) == 2
    assert index == {"grade.json": IndexLine(status="ok", failure_class=None, duration_s=1.5, resolved=True)}
    assert summary(tmp_path, "grade.json", index) == index["grade.json"]


def test_the_final_status_is_the_first_infra_error_else_the_agents_and_a_tampered_grade_over_all():
    ok = Record(status="ok")
    agent = Record(status="timeout", failure_class="agent_timeout", error="ran long")
    assert final_status({"sandbox": ok, "harness": agent, "patch": ok, "grade": Record(failure_class="empty_patch")}) \
        == ("timeout", "agent_timeout", None, "ran long")
    assert final_status({"harness": Record(status="ok"), "grade": Record(failure_class="tests_timeout", error="e")}) \
        == ("ok", "tests_timeout", None, "e")
    infra = {"sandbox": ok, "harness": agent, "patch": Record(status="infra_error", failure_class="patch_extract",
                                                              error="git diff failed"),
             "grade": Record(status="infra_error", failure_class="grader_crash")}
    assert final_status(infra) == ("infra_error", "patch_extract", "patch", "git diff failed")
    tampered = {"harness": ok, "grade": Record(status="tampered", failure_class="tampering")}
    assert final_status(tampered) == ("tampered", "tampering", "grade", None)
    # index lines, as `sandbatch status` reads them: no error indexed
    assert final_status({"harness": IndexLine(), "patch": IndexLine(status="infra_error", failure_class="patch_extract")}) \
        == ("infra_error", "patch_extract", "patch", None)


def test_a_record_missing_from_the_index_is_read_itself(tmp_path):
    (tmp_path / "harness.json").write_text(json.dumps({"status": "timeout", "failure_class": "harness_timeout",
                                                       "error": "x" * 10_000, "duration_s": 9.0}))
    (tmp_path / INDEX).write_text('{"record": "grade.json", "status": "ok"}\n{"record": "harn')  # cut short
    index = read_index(tmp_path)
    assert index == {"grade.json": IndexLine(status="ok")}
    assert summary(tmp_path, "harness.json", index) == IndexLine(status="timeout", failure_class="harness_timeout",
                                                                 duration_s=9.0)
    (tmp_path / "patch.json").write_text('{"status": ')
    with pytest.raises(ValueError):
        summary(tmp_path, "patch.json", index)


def _status(wd, run="default"):
    out = sandbatch("status", run, "-d", str(wd), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.slow
def test_status_of_a_partial_then_finished_run(tmp_path):
    done = run(tmp_path, "--until", "patch")
    assert done.returncode == 0, done.stderr[-3000:]
    st = _status(tmp_path)
    assert st["rollouts"] == 5 and st["done"] == 0 and st["resolved"] == 0
    assert st["steps"]["sandbox"] == {"ok": 5}
    assert st["steps"]["harness"] == {"ok": 5}
    assert st["steps"]["patch"] == {"ok": 5}
    assert st["steps"]["convert"] == {"pending": 5}
    assert st["steps"]["grade"] == {"pending": 5}
    assert st["snakemake"]["running"] is False and st["eta_s"] is None
    assert st["mean_step_s"]["harness"] > 0 and st["mean_step_s"]["grade"] is None

    done = run(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    for victim in sorted(tmp_path.glob("results/default/*/0/grade.json"))[:2]:
        victim.unlink()
    st = _status(tmp_path)
    assert st["done"] == 3 and st["resolved"] == 3 and st["resolved_rate_of_done"] == 1.0
    assert st["steps"]["grade"] == {"ok": 3, "pending": 2}
    assert st["steps"]["convert"] == {"ok": 5}
    assert st["status_counts"] == {"ok": 3} and st["failure_classes"] == {}

    text = sandbatch("status", "default", "-d", str(tmp_path)).stdout
    assert "done 3/5, resolved 3 (100.0% of done)" in text
    assert "no Snakemake running" in text


def test_status_of_an_unknown_run_is_one_line(tmp_path):
    out = sandbatch("status", "nope", "-d", str(tmp_path))
    assert out.returncode == 2
    assert out.stderr.startswith("sandbatch: error:") and "nope" in out.stderr
    assert "Traceback" not in out.stderr
