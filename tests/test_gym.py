"""NeMo Gym both ways, checked with NeMo Gym 0.4.0 itself (tests/gym_env.py): a run's gym
export is what its reward profiling reads, and its SWE-bench rows run here unchanged."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import gym_env
from harness_support import run_workflow, smoke_config
from sandbatch.core.config import parse
from sandbatch.tasks import load_tasks
from sandbatch.tasks.settings import prompt_for
from workflow_util import REPO, SMOKE_TASKS, snakemake, write_config

GYM_SWE_ROWS = "responses_api_agents/mini_swe_agent_2/data/example.jsonl"
OTHER_GYM_SWE_ROWS = ("responses_api_agents/mini_swe_agent/data/example.jsonl",
                      "responses_api_agents/swe_agents/data/example.jsonl")


def sandbatch(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sandbatch.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def three_tasks(tmp: Path) -> Path:
    """Two smoke tasks the gold patch resolves and one whose gold patch is wrong (reward 0)."""
    rows = {json.loads(line)["instance_id"]: json.loads(line) for line in SMOKE_TASKS.read_text().splitlines()}
    wrong = json.loads((REPO / "tests" / "fixtures" / "smoke_wrong_gold.jsonl").read_text().splitlines()[0])
    wrong["instance_id"] = "smoke__calc-wrong"
    out = []
    for row, base in ((rows["smoke__calc-1"], SMOKE_TASKS), (rows["smoke__textutils-1"], SMOKE_TASKS),
                      (wrong, REPO / "tests" / "fixtures" / "smoke_wrong_gold.jsonl")):
        out.append({**row, "repo_dir": str((base.parent / row["repo_dir"]).resolve())})
    path = tmp / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in out))
    return path


@pytest.mark.slow
def test_gym_export_is_read_by_gym_reward_profiling_with_the_same_numbers(tmp_path):
    gym_env.python()  # the service first: no run when it is missing
    cfg = smoke_config(tmp_path, {"name": "oracle"}, [], repeats=4, aggregate={"exports": ["gym"]})
    cfg["benchmark"] = {"kind": "smoke", "tasks": str(three_tasks(tmp_path))}
    run_dir, _ = run_workflow(tmp_path, cfg)
    gym_dir = run_dir / "gym"
    inputs, rollouts = gym_dir / "rollouts_materialized_inputs.jsonl", gym_dir / "rollouts.jsonl"
    written = {p.name: p.read_bytes() for p in gym_dir.iterdir()}
    assert set(written) == {"rollouts.jsonl", "rollouts_materialized_inputs.jsonl", "rollouts_failures.jsonl",
                            "rollouts_training.jsonl"}

    # the command writes what the run wrote
    shutil.rmtree(gym_dir)
    proc = sandbatch("export", "--format", "gym", "t", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert {p.name: p.read_bytes() for p in gym_dir.iterdir()} == written
    bad = sandbatch("export", "--format", "harbor", "t", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr == "sandbatch: error: export: --format 'harbor' is not known; choose one of: gym\n"

    ours = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    rewards: dict[str, list[float]] = defaultdict(list)
    for row in ours:
        rewards[row["instance_id"]].append(row["reward"])
    assert sorted(sum(v) / len(v) for v in rewards.values()) == [0.0, 1.0, 1.0]  # rewards differ

    tasks, agents = gym_env.reward_profile(inputs, rollouts)
    assert len(tasks) == 3 and all(t["num_rollouts"] == 4 and t["missing_num_rollouts"] == 0 for t in tasks)
    assert {t["sample"]["instance_id"]: t["mean/reward"] for t in tasks} == {
        iid: sum(v) / len(v) for iid, v in rewards.items()}
    assert [a["agent_ref"]["name"] for a in agents] == ["oracle"]
    assert agents[0]["mean/reward"] == pytest.approx(metrics["mean_reward"])

    exported = [json.loads(line) for line in rollouts.read_text().splitlines()]
    by_task: dict[int, list[dict]] = defaultdict(list)
    for row in exported:
        by_task[row["_ng_task_index"]].append(row)
    gym_pass = gym_env.pass_at_k([by_task[i] for i in sorted(by_task)])
    assert {k: pytest.approx(v) for k, v in metrics["pass_at_k"].items()} == {
        k: gym_pass[f"pass@{k}/accuracy"] for k in metrics["pass_at_k"]}
    assert set(metrics["pass_at_k"]) == {"1", "2", "3", "4"}
    gym_env.assert_valid_responses([row["response"] for row in exported])  # the oracle's response.json
    inputs_rows = [json.loads(line) for line in inputs.read_text().splitlines()]
    assert gym_env.validate_create_params([r["responses_create_params"] for r in inputs_rows]) == [[]] * 12


@pytest.mark.slow
def test_a_gym_row_runs_unchanged_with_its_prompt_and_comes_back_in_the_export(tmp_path):
    gym_env.python()
    row = json.loads(SMOKE_TASKS.read_text().splitlines()[0])
    params = {"input": [{"role": "system", "content": "You fix Python bugs.", "type": "message"},
                        {"role": "user", "content": "Make calc.divide return the true quotient.", "type": "message"}],
              "temperature": 1.0}
    row.update(responses_create_params=params, subset="smoke", split="test", agent_ref={"name": "gym_agent"},
               repo_dir=str((SMOKE_TASKS.parent / row["repo_dir"]).resolve()))
    (tmp_path / "tasks.jsonl").write_text(json.dumps(row) + "\n")
    cfg = smoke_config(tmp_path, {"name": "none"}, [], aggregate={"exports": ["gym"]})
    cfg["benchmark"] = {"kind": "swebench", "tasks": str(tmp_path / "tasks.jsonl")}
    run_dir, _ = run_workflow(tmp_path, cfg)
    trajectory = json.loads((run_dir / "smoke__calc-1" / "0" / "trajectory.json").read_text())
    assert trajectory["steps"][0] == {"step_id": 1, "source": "user",
                                      "message": "You fix Python bugs.\n\nMake calc.divide return the true quotient."}
    [exported] = [json.loads(line) for line in (run_dir / "gym" / "rollouts.jsonl").read_text().splitlines()]
    assert exported["responses_create_params"] == params  # the row's own request, as Gym would send it
    assert (exported["subset"], exported["split"], exported["agent_ref"]) == ("smoke", "test", {"name": "none"})
    assert (exported["reward"], exported["_ng_task_index"], exported["_ng_rollout_index"]) == (0.0, 0, 0)
    gym_env.assert_valid_responses([exported["response"]])  # the none harness's response.json


def test_export_names_a_missing_run_in_one_line(tmp_path):
    proc = sandbatch("export", "--format", "gym", "nosuch", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("sandbatch: error: results/nosuch/_settings/run.json: no such run; "
                                   "pass the run name of a started run (see results/)")


def test_gym_swe_rows_load_with_kind_swebench(tmp_path):
    """NeMo Gym's own SWE-bench rows (mini_swe_agent_2's example.jsonl): validate and a dry run accept them."""
    rows = tmp_path / "example.jsonl"
    shutil.copy(gym_env.package_file(GYM_SWE_ROWS), rows)
    config = write_config(tmp_path, "gym.yaml", {"run": "gym", "benchmark": {"kind": "swebench", "tasks": str(rows)}})
    proc = sandbatch("validate", str(config), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "# ok: 5 tasks x 1 repeats = 5 rollouts" in proc.stderr
    dry = snakemake(tmp_path, "-n", "--configfile", str(config))
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "harness          5" in dry.stdout
    # so do the SWE rows of Gym's other SWE agents; their `input` is empty: the prompt is the
    # problem statement, as Gym's SWE agents use it
    for path in (rows, *map(gym_env.package_file, OTHER_GYM_SWE_ROWS)):
        tasks = load_tasks(parse({"benchmark": {"kind": "swebench", "tasks": str(path)}}).benchmark)
        by_id = {json.loads(line)["instance_id"]: json.loads(line) for line in path.read_text().splitlines()}
        assert tasks and [t.prompt for t in tasks] == [by_id[t.instance_id]["problem_statement"] for t in tasks]


@pytest.mark.parametrize("given, prompt", [
    ([{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix divide()."}],
     "You fix bugs.\n\nFix divide()."),
    ([{"role": "user", "content": [{"type": "input_text", "text": "Fix "}, {"type": "input_text", "text": "it."}]}],
     "Fix it."),
    ([{"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "last"}],
     "last"),
    ("Fix divide() as a string.", "Fix divide() as a string."),
    ([{"role": "system", "content": "system only"}], "the problem statement"),
    ([], "the problem statement"),
])
def test_a_gym_rows_prompt_is_taken_as_gyms_opencode_agent_takes_it(tmp_path, given, prompt):
    row = json.loads(SMOKE_TASKS.read_text().splitlines()[0])
    row.update(problem_statement="the problem statement", responses_create_params={"input": given},
               repo_dir=str((SMOKE_TASKS.parent / row["repo_dir"]).resolve()))
    (tmp_path / "tasks.jsonl").write_text(json.dumps(row) + "\n")
    cfg = parse({"benchmark": {"kind": "swebench", "tasks": str(tmp_path / "tasks.jsonl")}})
    [task] = load_tasks(cfg.benchmark)
    assert prompt_for(task, cfg.benchmark) == prompt


def test_a_malformed_gym_input_is_one_line_naming_the_field(tmp_path):
    row = json.loads(SMOKE_TASKS.read_text().splitlines()[0])
    row.update(responses_create_params={"input": 7}, repo_dir=str((SMOKE_TASKS.parent / row["repo_dir"]).resolve()))
    (tmp_path / "tasks.jsonl").write_text(json.dumps(row) + "\n")
    config = write_config(tmp_path, "c.yaml", {"benchmark": {"kind": "swebench", "tasks": str(tmp_path / "tasks.jsonl")}})
    proc = sandbatch("validate", str(config), cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "tasks.jsonl" in proc.stderr and "responses_create_params" in proc.stderr, proc.stderr
