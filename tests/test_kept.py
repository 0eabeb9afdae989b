"""What a step keeps for its rerun (sandbatch.steps.kept): a capture counts only with the same
inputs and intact files, and the steps whose rerun could not redo their work restore it;
the few calls a step makes of it (sandbatch.steps.recovery), and kill points after a method.

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
    assert read_index(rollout)[PATCH_INFO].status == "ok"
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
    assert pid_file.exists() and pid_file.read_text().strip(), f"no pid in {pid_file} within 60 s"
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
    assert pid_file.exists() and pid_file.read_text().strip(), f"no pid in {pid_file} within 60 s"
    daemon = psutil.Process(int(pid_file.read_text()))
    assert daemon.is_running() and os.getsid(daemon.pid) == daemon.pid
    asyncio.run(provider.delete(sandbox_id))
    gone, alive = psutil.wait_procs([daemon], timeout=10)
    assert not alive, "the sandbox's delete left a process it started running"


class _Rollout:
    """A rollout directory with a real local provider: what a step's recovery works on."""

    def __init__(self, root):
        self.dir = root / "r"
        self.provider = LocalProvider({"root": str(root / "sb")})

    def path(self, name):
        return self.dir / name


def test_recovery_writes_through_a_capture_that_a_rerun_resumes_from_while_it_is_usable(tmp_path):
    from sandbatch.steps.recovery import Recovery

    ctx = _Rollout(tmp_path)
    recovery = Recovery(ctx, "patch")
    recovery.write({PATCH: b"diff\n"}, PATCH_INFO, PatchRecord(bytes=5), key={"in": 1})
    for name in (PATCH, PATCH_INFO):  # as Snakemake deletes a killed job's outputs
        ctx.path(name).unlink()
    gone = []

    async def unusable(found):
        gone.append(found.name)
        return False

    assert not asyncio.run(recovery.resume({"in": 2}))
    assert asyncio.run(recovery.resume({"in": 1}))
    assert ctx.path(PATCH).read_bytes() == b"diff\n" and load(PatchRecord, ctx.path(PATCH_INFO)).bytes == 5
    # what the kept outputs need is gone: they are forgotten, not restored
    ctx.path(PATCH).unlink()
    assert not asyncio.run(recovery.resume({"in": 1}, usable=unusable)) and gone == ["patch"]
    assert not ctx.path(PATCH).exists() and not asyncio.run(recovery.resume({"in": 1}))


def test_recovery_without_a_key_writes_the_outputs_and_leaves_its_sandboxes_to_the_rerun(tmp_path):
    from sandbatch.steps.recovery import Recovery

    ctx = _Rollout(tmp_path)
    recovery = Recovery(ctx, "harness")
    sandbox = asyncio.run(ctx.provider.create(SandboxSpec(labels={"run": "recovery-test"})))
    kept.note_sandbox(ctx.dir, "harness", sandbox.id)
    recovery.write({"events.jsonl": "{}\n", "model_calls.jsonl": None}, PATCH_INFO, PatchRecord(bytes=0))
    assert ctx.path("events.jsonl").read_text() == "{}\n" and ctx.path("model_calls.jsonl").read_text() == ""
    assert read_index(ctx.dir)[PATCH_INFO].status == "ok" and kept.find(ctx.dir, "harness", {}) is None
    asyncio.run(recovery.clear())  # the rerun of a step killed after that write
    assert asyncio.run(ctx.provider.list({"run": "recovery-test"})) == []
    kept.note_sandbox(ctx.dir, "harness", "sb-2")
    recovery.write({}, PATCH_INFO, PatchRecord(bytes=0), key={})  # a capture records them: handed on
    assert kept.noted(ctx.dir, "harness") == []


def test_a_kill_point_after_a_method_is_reached_when_it_returns_not_when_it_raises(tmp_path, monkeypatch):
    from sandbatch.core import killpoint

    trace = tmp_path / "trace"
    monkeypatch.setenv(killpoint.TRACE, str(trace))
    monkeypatch.setattr(killpoint, "step", "patch")

    @killpoint.after("extracted")
    async def extract(fail):
        if fail:
            raise RuntimeError("diff failed")
        return ["a.py"]

    with pytest.raises(RuntimeError):
        asyncio.run(extract(True))
    assert not trace.exists()
    assert asyncio.run(extract(False)) == ["a.py"]
    assert trace.read_text() == "patch:extracted\n"
