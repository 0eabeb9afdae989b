"""An agent that copies the fix from the repository's future, through the real workflow.

The task image (tests/fixtures/leaky_repo.sh) carries the fix in its repository's future.
The scripted agent (real mini-swe-agent, host mode, on Docker) looks for it the way agents
were seen to: every blob in the object store, the first that holds the fixed line copied
over calc.py. With `sandbox.history: keep` it finds it and is rewarded; by default it
finds nothing and gets 0, while the honest fix (the gold patch's change) still resolves
on the same image and the base ref the grader uses is the image's HEAD either way.
"""

from __future__ import annotations

import pytest

from docker_fixtures import docker_base_image, docker_engine  # noqa: F401 (fixtures)
from harness_support import rollout, run_workflow, scripted_model_server
from leaky_repo import EXPECTED, build_image, task_rows
from workflow_util import rollouts

pytestmark = pytest.mark.slow

COPY_FROM_FUTURE = (
    "git cat-file --batch-all-objects --batch-check='%(objectname) %(objecttype)' | awk '$2 == \"blob\" {print $1}' |"
    " while read -r b; do if git cat-file -p \"$b\" | grep -q 'return a / b'; then"
    " git cat-file -p \"$b\" > calc.py; echo \"copied $b\"; break; fi; done; git diff --stat")
HONEST = "sed -i 's|return a // b|return a / b|' calc.py && git diff --stat"


def _turns(command: str) -> list[dict]:
    return [{"content": "Working on it.", "tool_calls": [{"name": "bash", "arguments": {"command": command}}]}]


SCRIPT = {
    "tasks": {"LEAKY-HOSTILE": _turns(COPY_FROM_FUTURE), "LEAKY-HONEST": _turns(HONEST)},
    "final": {"content": "Submitting.", "tool_calls": [{"name": "bash", "arguments": {
        "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}]},
}


def _config(run: str, tasks, url: str, ids: list[str], **sandbox) -> dict:
    return {"run": run, "retries": 0,
            "benchmark": {"kind": "smoke", "tasks": str(tasks), "instance_ids": ids},
            "harness": {"name": "mini-swe-agent", "config": {"mode": "host", "step_limit": 4}},
            "model": {"name": "scripted", "base_url": url},
            "sandbox": {"provider": "docker", **sandbox}}


def test_copying_the_fix_from_the_future_earns_nothing(tmp_path, docker_engine, docker_base_image):
    import subprocess

    image = build_image(docker_engine, docker_base_image, tmp_path)
    base = subprocess.run([docker_engine, "run", "--rm", image, "cat", f"{EXPECTED}/base"],
                          capture_output=True, text=True, check=True).stdout.strip()
    tasks = task_rows(tmp_path, image, base)
    (tmp_path / "keep").mkdir()
    (tmp_path / "strip").mkdir()
    with scripted_model_server(SCRIPT) as (url, _):
        kept_dir, _ = run_workflow(tmp_path / "keep", _config("keep", tasks, url, ["leaky__hostile"],
                                                             history="keep"))
        strip_dir, _ = run_workflow(tmp_path / "strip", _config("strip", tasks, url,
                                                               ["leaky__hostile", "leaky__honest"]))

    # without the defence the copy works: the attack is real
    [kept] = rollouts(tmp_path / "keep", "keep")
    assert kept["reward"] == 1.0, kept
    assert rollout(kept_dir, "leaky__hostile", "sandbox.json")["history"] == {
        "setting": "keep", "refs_removed": 0, "objects_removed": 0, "bytes_removed": 0, "repositories": []}

    by_id = {r["instance_id"]: r for r in rollouts(tmp_path / "strip", "strip")}
    assert by_id["leaky__hostile"]["reward"] == 0.0 and not by_id["leaky__hostile"]["resolved"], by_id
    assert rollout(strip_dir, "leaky__hostile", "patch.diff") == ""  # nothing found to copy
    assert by_id["leaky__honest"]["reward"] == 1.0 and by_id["leaky__honest"]["resolved"], by_id
    honest = rollout(strip_dir, "leaky__honest", "patch.diff")
    assert "-    return a // b\n+    return a / b\n" in honest and honest.count("diff --git") == 1
    for task in ("leaky__hostile", "leaky__honest"):
        handle = rollout(strip_dir, task, "sandbox.json")
        assert handle["base_ref"] == base  # the grader's base is the image's HEAD, as before
        assert handle["history"]["setting"] == "strip" and handle["history"]["refs_removed"] == 13, handle
    assert rollout(kept_dir, "leaky__hostile", "sandbox.json")["base_ref"] == base
