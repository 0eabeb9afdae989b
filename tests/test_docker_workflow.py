"""The smoke benchmark end to end through the workflow on the docker provider."""

import json

import pytest

from docker_fixtures import containers, docker_base_image, docker_engine  # noqa: F401 (fixtures)
from suite import unique_run
from workflow_util import REPO, SMOKE_TASKS, rollouts, snakemake

pytestmark = pytest.mark.slow


def test_oracle_resolves_smoke_in_containers_and_leaves_none(tmp_path, docker_engine, docker_base_image):
    run = unique_run("docker")
    proc = snakemake(tmp_path, "--configfile", str(REPO / "config" / "smoke_docker.yaml"),
                     "--config", f"run={run}", f"sandbox={{'default_image': '{docker_base_image}'}}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = rollouts(tmp_path, run)
    assert len(rows) == sum(1 for l in SMOKE_TASKS.read_text().splitlines() if l.strip())
    assert all(r["resolved"] for r in rows), [(r["instance_id"], r["failure_class"]) for r in rows]
    left = containers(docker_engine, run=run)
    assert left == []


def test_terminal_bench_oracle_in_containers(tmp_path, docker_engine, docker_base_image):
    """Terminal-Bench tasks: solve.sh, then test.sh in a fresh container; both reward files
    (reward.txt, reward.json) are read from the container; a task without one is an infra
    error, never a 0."""
    run = unique_run("tb")
    tasks = REPO / "tests" / "fixtures" / "bench" / "terminal_bench"
    ids = ["hello-world", "json-reward", "no-reward"]
    # the fixtures name images that cannot be pulled here: run them all on the base image
    rewrites = [{"prefix": f"ghcr.io/example/tb-{i}:20251031", "replace": docker_base_image} for i in ids]
    config = tmp_path / "tb.yaml"
    config.write_text(json.dumps({
        "run": run, "harness": {"name": "oracle"}, "retries": 0,
        "benchmark": {"kind": "terminal_bench", "tasks": str(tasks), "instance_ids": ids},
        "sandbox": {"provider": "docker", "image_rewrites": rewrites}}))
    proc = snakemake(tmp_path, "--configfile", str(config))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r["instance_id"]: r for r in rollouts(tmp_path, run)}
    assert rows["hello-world"]["reward"] == 1.0 and rows["hello-world"]["resolved"]
    assert rows["json-reward"]["reward"] == 1.0 and rows["json-reward"]["resolved"]
    assert rows["no-reward"]["failure_class"] == "grading_no_reward" and not rows["no-reward"]["resolved"]
    left = containers(docker_engine, run=run)
    assert left == []
