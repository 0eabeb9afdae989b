"""The real Snakemake runs the real workflow on the bundled smoke benchmark."""

import json

import pytest

from gym_env import assert_valid_responses
from sandbatch.sandbox.local import default_root
from workflow_util import REPO, SMOKE_TASKS, metrics, mtimes, rollouts, snakemake, write_config

pytestmark = pytest.mark.slow
N_SMOKE = sum(1 for line in SMOKE_TASKS.read_text().splitlines() if line.strip())


def _ok(proc):
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory):
    wd = tmp_path_factory.mktemp("oracle")
    _ok(snakemake(wd))
    return wd


def test_oracle_resolves_every_smoke_task(oracle_run):
    rows = rollouts(oracle_run)
    assert len(rows) == N_SMOKE
    assert all(r["resolved"] and r["reward"] == 1.0 and r["status"] == "ok" for r in rows), rows
    m = metrics(oracle_run)
    assert m["pass_at_k"] == {"1": 100.0}
    assert m["resolved_rate"] == {"value": 1.0, "numerator": N_SMOKE, "denominator": N_SMOKE}
    run_dir = oracle_run / "results" / "default"
    for name in ("sandbox.json", "events.jsonl", "harness.json", "response.json", "patch.diff", "grade.json"):
        assert len(list(run_dir.glob(f"*/0/{name}"))) == N_SMOKE, name
    assert_valid_responses([json.loads(p.read_text()) for p in run_dir.glob("*/0/response.json")])
    preds = [json.loads(l) for l in (run_dir / "predictions.jsonl").read_text().splitlines()]
    assert {p["instance_id"] for p in preds} == {r["instance_id"] for r in rows}
    assert all(p["model_patch"].startswith("diff --git") for p in preds)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["config"]["harness"]["name"] == "oracle" and "snakemake" in manifest["versions"]
    assert manifest["started_at"] <= manifest["finished_at"]
    report = (run_dir / "report.md").read_text()
    assert f"100.0% ({N_SMOKE}/{N_SMOKE})" in report
    # every agent and grading sandbox is gone
    assert not list(default_root(oracle_run).glob("*"))


def test_second_run_does_no_work(oracle_run):
    before = mtimes(oracle_run, "**/*.json")
    proc = _ok(snakemake(oracle_run))
    assert "Nothing to be done" in proc.stdout + proc.stderr
    assert mtimes(oracle_run, "**/*.json") == before


def test_deleting_one_grade_reruns_only_that_grade(oracle_run):
    run_dir = oracle_run / "results" / "default"
    victim = sorted(run_dir.glob("*/0/grade.json"))[0]
    before = mtimes(oracle_run, "*/0/*.json")
    victim.unlink()
    _ok(snakemake(oracle_run))
    after = mtimes(oracle_run, "*/0/*.json")
    changed = sorted(k for k in after if after[k] != before.get(k))
    assert changed == [str(victim.relative_to(oracle_run))]


def test_grading_settings_rerun_grades_and_aggregate_never_the_agent(oracle_run):
    harness_before = mtimes(oracle_run, "*/0/harness.json")
    grades_before = mtimes(oracle_run, "*/0/grade.json")
    metrics_before = mtimes(oracle_run, "metrics.json")
    _ok(snakemake(oracle_run, "--config", "grading={'reward_threshold': 0.5}"))
    assert mtimes(oracle_run, "*/0/harness.json") == harness_before
    grades_after = mtimes(oracle_run, "*/0/grade.json")
    assert all(grades_after[k] != v for k, v in grades_before.items())
    assert mtimes(oracle_run, "metrics.json") != metrics_before
    assert metrics(oracle_run)["reward_threshold"] == 0.5


def test_aggregate_settings_rerun_only_the_aggregate(oracle_run):
    # whatever grading settings an earlier test left: bring the run to a known state first
    _ok(snakemake(oracle_run, "--config", "grading={'reward_threshold': 0.5}"))
    per_rollout = mtimes(oracle_run, "*/0/*")
    _ok(snakemake(oracle_run, "--config", "grading={'reward_threshold': 0.5}",
                  "aggregate={'report_title': 'Smoke check'}"))
    assert mtimes(oracle_run, "*/0/*") == per_rollout
    assert (oracle_run / "results/default/report.md").read_text().startswith("# Smoke check")


def test_none_resolves_nothing(tmp_path):
    _ok(snakemake(tmp_path, "--config", "harness={'name': 'none'}", "run=floor"))
    rows = rollouts(tmp_path, "floor")
    assert len(rows) == N_SMOKE
    assert not any(r["resolved"] for r in rows)
    assert all(r["patch_empty"] and r["failure_class"] == "empty_patch" for r in rows)
    assert metrics(tmp_path, "floor")["pass_at_k"] == {"1": 0.0}


def test_wrong_gold_patch_is_unresolved_and_repeats_give_pass_at_k(tmp_path):
    tasks = REPO / "tests" / "fixtures" / "smoke_wrong_gold.jsonl"
    cfg = write_config(tmp_path, "wrong.yaml", {"run": "wrong", "repeats": 3,
                                                "benchmark": {"tasks": str(tasks)}})
    _ok(snakemake(tmp_path, "--configfile", str(cfg)))
    rows = rollouts(tmp_path, "wrong")
    assert len(rows) == 3 and {r["repeat"] for r in rows} == {0, 1, 2}
    assert not any(r["resolved"] for r in rows)
    assert all(r["tests_ran"] and r["tests_status"]["FAIL_TO_PASS"]["failure"] for r in rows)
    assert metrics(tmp_path, "wrong")["pass_at_k"] == {"1": 0.0, "2": 0.0, "3": 0.0}
    report = (tmp_path / "results/wrong/report.md").read_text()
    assert all(f"| pass@{k} | 0.0 |" in report for k in (1, 2, 3)), report


def test_repeats_and_limit_from_the_command_line(tmp_path):
    _ok(snakemake(tmp_path, "--config", "repeats=2", "benchmark={'limit': '2'}", "run=r2"))
    rows = rollouts(tmp_path, "r2")
    assert len(rows) == 4
    assert metrics(tmp_path, "r2")["pass_at_k"] == {"1": 100.0, "2": 100.0}


def test_dry_run_touches_nothing(tmp_path):
    proc = _ok(snakemake(tmp_path, "-n"))
    assert "harness" in proc.stdout and "aggregate" in proc.stdout
    assert not (tmp_path / "results").exists()
    assert not (tmp_path / ".sandbatch").exists()


BAD_TASKS_DUP = '{"instance_id": "a", "problem_statement": "", "patch": "", "test_patch": "", "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]"}\n'


@pytest.mark.parametrize("setup,args,expected", [
    (None, ["--config", "bogus=1"], "unknown key 'bogus'"),
    (None, ["--config", "repeats=oops"], "repeats: 'oops' has the wrong type; expected integer"),
    (None, ["--config", "harness={'name': 'gpt'}"], "harness.name: 'gpt' is not allowed; choose one of:"),
    (None, ["--config", "sandbox={'provider': 'k8s'}"], "sandbox.provider: 'k8s' is not allowed"),
    (None, ["--config", "benchmark={'kind': 'mmlu'}"], "benchmark.kind: 'mmlu' is not allowed"),
    (None, ["--config", "benchmark={'tasks': 'missing.jsonl'}"], "benchmark.tasks: 'missing.jsonl' not found"),
    (None, ["--config", "repeats=0"], "repeats: 0 is too small; it must be >= 1"),
    ("malformed", [], "tasks.jsonl:2: not valid JSON"),
    ("duplicate", [], "duplicate task id 'a'"),
    ("badfield", [], "tasks.jsonl:1: field FAIL_TO_PASS"),
])
def test_bad_input_is_one_line_without_traceback(tmp_path, setup, args, expected):
    extra = []
    if setup in ("malformed", "duplicate", "badfield"):
        body = {"malformed": BAD_TASKS_DUP + "{not json\n", "duplicate": BAD_TASKS_DUP * 2,
                "badfield": BAD_TASKS_DUP.replace('"FAIL_TO_PASS": "[]"', '"FAIL_TO_PASS": 7')}[setup]
        (tmp_path / "tasks.jsonl").write_text(body)
        extra = ["--config", f"benchmark={{'tasks': '{tmp_path / 'tasks.jsonl'}'}}"]
    proc = snakemake(tmp_path, *args, *extra)
    assert proc.returncode != 0
    errors = [l for l in proc.stderr.splitlines() if l.startswith("sandbatch: error:")]
    assert len(errors) == 1 and expected in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "results").exists()


def test_aggregate_reads_exactly_the_rollouts_it_is_handed(oracle_run, tmp_path):
    """Handed a list of grade.json files (--inputs), the aggregate aggregates those, in that
    order, and refuses a path that is no rollout of the run."""
    import shutil
    import subprocess
    import sys

    wd = tmp_path / "copy"
    shutil.copytree(oracle_run / "results", wd / "results")
    grades = sorted(str(p.relative_to(wd)) for p in (wd / "results/default").glob("*/0/grade.json"))
    script = REPO / "workflow" / "scripts" / "aggregate.py"

    def aggregate(lines):
        return subprocess.run([sys.executable, str(script), "--config", "results/default/_settings/run.json",
                               "--inputs", "-"], input="\n".join(lines), text=True, capture_output=True, cwd=wd)

    done = aggregate(grades[-1:] + grades[:1])
    assert done.returncode == 0, done.stderr
    rows = rollouts(wd)
    assert [r["task_id"] for r in rows] == [grades[-1].split("/")[2], grades[0].split("/")[2]]
    bad = aggregate(["results/default/no-such-task/0/grade.json"])
    assert bad.returncode == 2 and "not a grade.json of a task of this run" in bad.stderr
