"""The shipped configs that run an open harness on Docker (config/mini_*.yaml), each run
exactly as shipped: no --config at all, the task file where the config names it (relative:
the working directory is looked in first), and only the variables its header lists set,
the model URL pointing at the scripted model.

One short run per config, in parallel: one task in its benchmark's real row format
(SWE-bench 5.x rows with their own eval_script, SWE-bench Pro rows with run_scripts/,
Terminal-Bench task directories; tests/test_named_profiles.py builds them), its image
built here from sandbatch/base:bookworm under the public name the row names, so nothing
is pulled. The model applies the reference fix in one shell call and submits; the task
comes out resolved only if that fix reached the container and the grader saw it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from docker_fixtures import docker_base_image, docker_engine  # noqa: F401 (fixtures)
from harness_support import scripted_model_server
from sandbatch.core import resources
from test_named_profiles import SERVED, TB_TASKS, pro_row, smoke_rows, swebench_row, terminal_bench_task, wait_all

pytestmark = pytest.mark.slow

# config -> the task it runs (a smoke task in the benchmark's format, or a Terminal-Bench task)
CONFIGS = {
    "mini_swe_verified": "smoke__calc-1",
    "mini_swe_multilingual": "smoke__duration-1",
    "mini_swe_pro": "smoke__lrucache-1",
    "mini_terminal_bench": "hello-file",
}
SUBMIT = {"content": "Done.", "tool_calls": [{"name": "bash", "arguments": {
    "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}]}


def write_tasks(name: str, task: str, base: str, workdir: Path) -> None:
    """The config's one task, where the config's benchmark.tasks points, relative to `workdir`."""
    from sandbatch.core.config import read_yaml

    where = workdir / read_yaml(resources.config_file(name))["benchmark"]["tasks"]
    if name.endswith("terminal_bench"):
        where.mkdir(parents=True)
        terminal_bench_task(base, task, where, mirror="")
        return
    where.parent.mkdir(parents=True)
    ctx = workdir.parent / "images"
    ctx.mkdir()
    row = (pro_row(base, task, ctx, where.parent, mirror="") if name.endswith("pro")
           else swebench_row(base, task, ctx, mirror=""))
    where.write_text(json.dumps(row) + "\n")


def model_script() -> dict:
    """Each task's reference fix in one bash call (mini's tool), then the submit command."""
    rows, tasks = smoke_rows(), {}
    for task in CONFIGS.values():
        if task in TB_TASKS:
            key, cmd = f"{task}.txt", f"echo '{TB_TASKS[task]}' > /app/{task}.txt"
        else:
            key = rows[task]["problem_statement"].splitlines()[0]
            cmd = f"git apply - <<'EOF'\n{rows[task]['patch']}\nEOF"
        tasks[key] = [{"content": "Applying the fix.", "tool_calls": [{"name": "bash", "arguments": {"command": cmd}}]}]
    return {"tasks": tasks, "final": SUBMIT, "models": [SERVED]}


def test_every_open_harness_config_runs_as_shipped(tmp_path, docker_engine, docker_base_image):  # noqa: F811
    with scripted_model_server(model_script()) as (url, model):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SANDBATCH_"))}
        env.update({"SANDBATCH_MODEL_URL": url, "SANDBATCH_MODEL_NAME": SERVED})
        procs = {}
        t0 = time.monotonic()
        for name, task in CONFIGS.items():
            workdir = tmp_path / name / "run"
            workdir.mkdir(parents=True)
            write_tasks(name, task, docker_base_image, workdir)
            cmd = [sys.executable, "-m", "snakemake", "-s", str(resources.snakefile()), "--cores", "2",
                   "--configfile", str(resources.config_file(name))]
            log = open(workdir.parent / "snakemake.log", "w")
            procs[name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir), log)
        failures = wait_all(procs, timeout=1200)
        took = time.monotonic() - t0
    leftovers = {name: subprocess.run([docker_engine, "ps", "-aq", "--filter", f"label=sandbatch.run={name}"],
                                      capture_output=True, text=True, check=True).stdout.split() for name in CONFIGS}
    assert not failures, failures
    assert not any(leftovers.values()), leftovers

    for name, task in CONFIGS.items():
        run = tmp_path / name / "run" / "results" / name
        [row] = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
        assert row["instance_id"] == (f"instance_{task}" if name.endswith("pro") else task), row
        assert (row["status"], row["resolved"], row["reward"]) == ("ok", True, 1.0), (name, row)
        harness = json.loads(next(run.glob("*/0/harness.json")).read_text())
        assert harness["metadata"]["exit_status"] == "Submitted", (name, harness)
        calls = [json.loads(line) for line in next(run.glob("*/0/model_calls.jsonl")).read_text().splitlines()]
        assert len(calls) == 2 and all(c["status"] == 200 for c in calls), (name, calls)
        assert json.loads((run / "manifest.json").read_text())["config"]["model"]["name"] == SERVED
        assert (run / "report.md").is_file()
    chat = [r for r in model.requests if r["path"].endswith("/chat/completions")]
    assert len(chat) == 2 * len(CONFIGS) and all(r["body"]["model"] == SERVED for r in chat)
    print(f"{len(CONFIGS)} shipped open-harness configs x 1 rollout on Docker: {took:.0f} s")
