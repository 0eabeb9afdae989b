"""mini-swe-agent on a task image without Python, in containers, through the real workflow.

The image is the base image with every Python removed; the task (Terminal-Bench
hello-world) is fixed by a shell edit. In host mode the real mini-swe-agent runs here
against the scripted model and each command goes through the docker provider; in
sandbox mode the install cannot work and says so in one line.
"""

from __future__ import annotations

import json

import pytest

from docker_fixtures import containers, docker_base_image, docker_engine, no_python_image  # noqa: F401 (fixtures)
from suite import unique_run
from harness_support import items_of, rollout, scripted_model_server
from workflow_util import REPO, rollouts, snakemake, write_config

pytestmark = pytest.mark.slow

TASKS = REPO / "tests" / "fixtures" / "bench" / "terminal_bench"
SCRIPT = {
    "tasks": {"hello.txt": [
        {"content": "Is there a Python?", "tool_calls": [{"name": "bash", "arguments": {
            "command": "command -v python3 python || echo no python; pwd"}}]},
        {"content": "Writing the file.", "tool_calls": [{"name": "bash", "arguments": {
            "command": "printf 'Hello, world!\\n' > hello.txt && cat hello.txt"}}]},
    ]},
    "final": {"content": "Submitting.", "tool_calls": [{"name": "bash", "arguments": {
        "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}]},
}


def run_hello_world(tmp_path, image, mode, url, graded_nothing=False):
    """The run of hello-world; graded_nothing: its one rollout is expected to end in an
    infrastructure error, which fails the run (exit 1) with a line saying so."""
    run = unique_run(f"mini-{mode}")
    config = write_config(tmp_path, "config.yaml", {
        "run": run, "retries": 0,
        "benchmark": {"kind": "terminal_bench", "tasks": str(TASKS), "instance_ids": ["hello-world"]},
        "harness": {"name": "mini-swe-agent", "config": {"mode": mode, "step_limit": 5}},
        "model": {"name": "scripted", "base_url": url},
        "sandbox": {"provider": "docker", "image_rewrites": [
            {"prefix": "ghcr.io/example/tb-hello-world:20251031", "replace": image}]}})
    proc = snakemake(tmp_path, "--configfile", str(config), "--keep-going", timeout=900)
    assert proc.returncode == (1 if graded_nothing else 0), proc.stderr[-3000:]
    assert ("graded nothing" in proc.stderr) == graded_nothing, proc.stderr[-3000:]
    return run, tmp_path / "results" / run


def leftover(docker_engine, run):
    return containers(docker_engine, run=run)


def test_host_mode_resolves_a_task_on_an_image_without_python(tmp_path, docker_engine, no_python_image):
    with scripted_model_server(SCRIPT) as (url, model):
        run, run_dir = run_hello_world(tmp_path, no_python_image, "host", url)
    h = rollout(run_dir, "hello-world", "harness.json")
    assert (h["status"], h["metadata"]["exit_status"]) == ("ok", "Submitted"), h
    # mini-swe-agent talks to its model from this host: its commands' sandbox has no network
    assert (h["network"]["policy"], h["network"]["enforced"]) == ("none", True), h["network"]
    resp = rollout(run_dir, "hello-world", "response.json")
    first = json.loads(items_of(resp, "function_call_output")[0]["output"])
    assert first["output"].splitlines() == ["no python", "/app"]  # ran in the container, in the workdir
    [row] = rollouts(tmp_path, run)
    assert row["reward"] == 1.0 and row["resolved"], row
    assert len([r for r in model.requests if r["path"].endswith("/chat/completions")]) == 3
    assert leftover(docker_engine, run) == []


def test_sandbox_mode_says_to_use_host_mode(tmp_path, docker_engine, no_python_image):
    with scripted_model_server(SCRIPT) as (url, model):
        run, run_dir = run_hello_world(tmp_path, no_python_image, "sandbox", url, graded_nothing=True)
    h = rollout(run_dir, "hello-world", "harness.json")
    assert (h["status"], h["failure_class"]) == ("infra_error", "harness_install"), h
    assert "\n" not in h["error"] and "harness.config.mode: host" in h["error"], h["error"]
    [row] = rollouts(tmp_path, run)
    assert (row["status"], row["failure_class"], row["tests_ran"]) == ("infra_error", "harness_install", False), row
    assert [r["path"] for r in model.requests] == ["/v1/models"]  # the run's preflight, no model call
    assert leftover(docker_engine, run) == []
