"""What a step keeps for its rerun (sandbatch.steps.kept): a capture counts only with the same
inputs and intact files, and the steps whose rerun could not redo their work restore it.

The end-to-end kills are tests/test_kill_points.py; here the state a kill leaves is made
directly: the outputs deleted (as Snakemake or recovery deletes them), the capture kept.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest

import test_benchmark_grading as bench
from sandbatch.contracts.records import GRADE, INDEX, PATCH, PATCH_INFO, GradeRecord, PatchRecord, load, read_index
from sandbatch.sandbox.base import SandboxSpec
from sandbatch.sandbox.local import LocalProvider
from sandbatch.steps import kept
from sandbatch.steps.common import run_step
from sandbatch.steps.grade import GradeStep
from sandbatch.steps.patch import PatchStep


def _published(tmp_path):
    rollout = tmp_path / "r"
    kept.publish(rollout, "patch", {"harness.json": "abc"}, {PATCH: b"diff\n"}, PATCH_INFO, PatchRecord(bytes=5))
    return rollout


def test_a_capture_counts_only_with_the_same_inputs_and_intact_files(tmp_path):
    rollout = _published(tmp_path)
    assert (rollout / PATCH).read_bytes() == b"diff\n" and load(PatchRecord, rollout / PATCH_INFO).bytes == 5
    assert read_index(rollout)[PATCH_INFO]["status"] == "ok"
    assert kept.find(rollout, "patch", {"harness.json": "other"}) is None
    found = kept.find(rollout, "patch", {"harness.json": "abc"})
    assert found is not None
    # the outputs are links to the capture: deleting them (as Snakemake does) leaves it whole
    (rollout / PATCH).unlink()
    (rollout / PATCH_INFO).unlink()
    assert kept.restore(rollout, "patch", found) == [PATCH, PATCH_INFO]
    assert (rollout / PATCH).read_bytes() == b"diff\n"
    (found / PATCH).write_bytes(b"changed\n")
    assert kept.find(rollout, "patch", {"harness.json": "abc"}) is None


def test_a_restore_gives_the_record_its_index_line_when_the_kill_came_before_it(tmp_path):
    rollout = _published(tmp_path)
    (rollout / INDEX).unlink()
    (rollout / PATCH_INFO).unlink()
    kept.restore(rollout, "patch", kept.find(rollout, "patch", {"harness.json": "abc"}))
    kept.restore(rollout, "patch", kept.find(rollout, "patch", {"harness.json": "abc"}))
    assert (rollout / INDEX).read_text().count(PATCH_INFO) == 1


def test_noted_sandboxes_are_deleted_by_the_rerun(tmp_path):
    from sandbatch.sandbox.base import SandboxSpec

    provider = LocalProvider({"root": str(tmp_path / "sb")})
    sandbox = asyncio.run(provider.create(SandboxSpec(labels={"run": "kept-test"})))
    kept.note_sandbox(tmp_path, "grade", sandbox.id)
    assert asyncio.run(kept.delete_noted(tmp_path, "grade", provider)) == [sandbox.id]
    assert asyncio.run(provider.list({"run": "kept-test"})) == [] and kept.noted(tmp_path, "grade") == []


@pytest.mark.parametrize("in_agent_sandbox", [True, False])
def test_a_rerun_after_the_agent_sandbox_is_gone_restores_patch_and_grade(tmp_path, monkeypatch, in_agent_sandbox):
    """Terminal-Bench task graded in the agent's sandbox (or a fresh one): the patch and grade
    steps delete the agent's sandbox; their outputs deleted afterwards (a kill before Snakemake
    recorded them) come back from their captures, where a rerun could not take them again."""
    monkeypatch.chdir(tmp_path)
    cfg_path = bench.make_cfg(tmp_path, "terminal_bench", bench.FIX / "terminal_bench",
                              grading={"in_agent_sandbox": in_agent_sandbox})
    ctx, sb = bench.agent_sandbox(cfg_path, "hello-world")
    bench.write(sb, "/app/hello.txt", "Hello, world!\n")
    first = bench.finish(ctx)
    assert first.resolved and bench.sandboxes_left(tmp_path) == []
    outputs = {name: ctx.path(name).read_bytes() for name in (PATCH, PATCH_INFO, GRADE)}

    for name in (PATCH, PATCH_INFO, GRADE):
        ctx.path(name).unlink()
    asyncio.run(run_step(PatchStep(ctx)))
    assert {n: ctx.path(n).read_bytes() for n in (PATCH, PATCH_INFO)} == {n: outputs[n] for n in (PATCH, PATCH_INFO)}
    asyncio.run(run_step(GradeStep(ctx)))
    again = load(GradeRecord, ctx.path(GRADE))
    assert again.resolved and again.status == "ok"
    if in_agent_sandbox:  # nothing could grade it again: the kept grade is restored
        assert ctx.path(GRADE).read_bytes() == outputs[GRADE]
    else:  # a fresh sandbox grades the saved patch again
        assert again.started_at != json.loads(outputs[GRADE])["started_at"]
    assert bench.sandboxes_left(tmp_path) == []


def test_a_command_of_a_killed_step_ends_with_its_sandbox(tmp_path):
    """A local sandbox's command runs in a session of its own: when its step is SIGKILLed it
    runs on, and the sandbox's delete (the rerun's or the reaper's) ends it."""
    import subprocess
    import sys
    import time

    import psutil

    root = tmp_path / "sb"
    code = (f"import asyncio\nfrom sandbatch.sandbox.local import LocalProvider\n"
            f"from sandbatch.sandbox.base import SandboxSpec\n"
            f"async def main():\n"
            f"    sb = await LocalProvider({{'root': {str(root)!r}}}).create(SandboxSpec(labels={{'run': 'kept'}}))\n"
            f"    print(sb.id, flush=True)\n"
            f"    await sb.exec('sleep 300 & echo $! > pid; wait', timeout=600)\n"
            f"asyncio.run(main())\n")
    step = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    sandbox_id = step.stdout.readline().strip()
    pid_file = root / sandbox_id / "work" / "pid"
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    command = psutil.Process(int(pid_file.read_text()))
    step.kill()
    step.wait()
    assert command.is_running(), "the command ended with its step"
    asyncio.run(LocalProvider({"root": str(root)}).delete(sandbox_id))
    gone, alive = psutil.wait_procs([command], timeout=10)
    assert not alive, "the sandbox's delete left its command running"


def test_a_process_that_left_its_group_ends_with_its_sandbox(tmp_path):
    """What a command started in a session of its own (setsid, a daemon the agent leaves) is not in
    the command's process group; the local sandbox's delete ends it too (it has the sandbox's HOME)."""
    import time

    import psutil

    root = tmp_path / "sb"
    provider = LocalProvider({"root": str(root)})

    async def start() -> str:
        sb = await provider.create(SandboxSpec(labels={"run": "kept"}))
        await sb.exec("setsid sh -c 'echo $$ > pid; exec sleep 300' >/dev/null 2>&1 < /dev/null &", timeout=60)
        return sb.id

    sandbox_id = asyncio.run(start())
    pid_file = root / sandbox_id / "work" / "pid"
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    daemon = psutil.Process(int(pid_file.read_text()))
    assert daemon.is_running() and os.getsid(daemon.pid) == daemon.pid
    asyncio.run(provider.delete(sandbox_id))
    gone, alive = psutil.wait_procs([daemon], timeout=10)
    assert not alive, "the sandbox's delete left a process it started running"
