"""How many operations the engine sees: what a sandbox's creation and Terminal-Bench's grading
in the agent's container cost it, counted from the engine's own event stream."""

from __future__ import annotations

import asyncio
import json
import queue
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from docker_fixtures import BASE_IMAGE, docker_base_image, docker_engine, docker_run_label  # noqa: F401 (fixtures)
from sandbatch.core import config
from sandbatch.grading import tb_verifier
from sandbatch.grading.terminal_bench import _files
from sandbatch.sandbox.base import SandboxSpec
from sandbatch.sandbox.docker import DockerProvider


class EngineEvents:
    """The engine's container events for one run label while the block runs. The block's edges
    are marked by a probe: a container of the same label created and removed, whose events are
    left out. The engine sends events in order, so once the first probe's removal has come the
    stream is live, and once the last one's has every event of the block has come too."""

    def __init__(self, cli: str, label: str):
        self.cli, self.label = cli, label
        self.seen: list[dict] = []
        self.lines: queue.Queue[str] = queue.Queue()
        self.probes: set[str] = set()

    def __enter__(self):
        self.proc = subprocess.Popen([self.cli, "events", "--format", "{{json .}}", "--filter", "type=container",
                                      "--filter", f"label=sandbatch.run={self.label}"],
                                     stdout=subprocess.PIPE, text=True)
        threading.Thread(target=lambda: [self.lines.put(line) for line in self.proc.stdout], daemon=True).start()
        self._mark()
        self.seen = []
        return self

    def __exit__(self, *exc):
        try:
            self._mark()
        finally:
            self.proc.terminate()
            self.proc.wait()

    def _mark(self, bound: float = 60) -> None:
        """Create and remove a probe container, then read events until its removal's; `bound`: the
        seconds two engine calls and their events may take on a loaded host."""
        probe = subprocess.run([self.cli, "create", "--label", f"sandbatch.run={self.label}", BASE_IMAGE, "true"],
                               capture_output=True, text=True, check=True).stdout.strip()
        self.probes.add(probe)
        subprocess.run([self.cli, "rm", probe], capture_output=True, check=True)
        deadline = time.monotonic() + bound
        while True:
            try:
                event = json.loads(self.lines.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                raise AssertionError(f"docker events: the probe {probe[:12]}'s destroy did not come within "
                                     f"{bound:.0f} s; saw {[e['Action'] for e in self.seen]}") from None
            actor = event.get("Actor", {}).get("ID")
            if actor == probe and event["Action"] == "destroy":
                return
            if actor not in self.probes:
                self.seen.append(event)

    def count(self) -> Counter:
        return Counter(e["Action"].split(":")[0] for e in self.seen)


def test_create_runs_no_command_and_the_scratch_directory_is_there(docker_engine, docker_base_image,
                                                                    docker_run_label):
    async def go():
        provider = DockerProvider()
        sb = await provider.create(SandboxSpec(image=docker_base_image, labels={"run": docker_run_label},
                                               workdir="/work/repo", ttl_seconds=300))
        return provider, sb

    with EngineEvents(docker_engine, docker_run_label) as events:
        provider, sb = asyncio.run(go())
    ops = events.count()
    assert ops["create"] == 1 and ops["start"] == 1 and ops["exec_create"] == 0, ops
    assert ops["extract-to-dir"] == 1  # the scratch directory, put in before the start

    async def use():
        res = await sb.exec(f"touch {sb.tmpdir}/x && stat -c %a {sb.tmpdir} && pwd", timeout=30)
        await provider.delete(sb.id)
        return res

    res = asyncio.run(use())
    assert res.ok and res.stdout.split() == ["755", "/work/repo"], res


def test_verifier_isolation_and_reward_files_in_few_commands(docker_engine, docker_base_image, docker_run_label):
    """The core tools' links and the agent's preload moved aside in one command; which reward
    files exist asked in one; what each does still holds."""
    if tb_verifier._first(tb_verifier.BUSYBOX) is None:
        pytest.fail("busybox-static is missing on this host; run scripts/setup.sh (as root)")

    async def go():
        provider = DockerProvider()
        sb = await provider.create(SandboxSpec(image=docker_base_image, labels={"run": docker_run_label},
                                               workdir="/app", ttl_seconds=300))
        try:
            await sb.exec("mkdir -p /logs/v && echo 1 > /logs/v/reward.txt && touch /etc/ld.so.preload", timeout=30)
            with EngineEvents(docker_engine, docker_run_label) as events:
                iso = await tb_verifier.prepare(sb, "/logs")
                found = await _files(sb, "/logs/v/reward.json", "/logs/v/reward.txt")
            tools = await sb.exec(f"{iso.dir}/bin/cat /logs/v/reward.txt && test ! -e /etc/ld.so.preload", timeout=30)
            return iso, found, tools, events.count()
        finally:
            await provider.delete(sb.id)

    iso, found, tools, ops = asyncio.run(go())
    assert iso.tampering == [{"path": "/etc/ld.so.preload", "kind": "runner_hook", "action": "removed"}]
    assert found == [None, b"1\n"]
    assert tools.ok and tools.stdout == "1\n", tools
    # stop the processes, links and preload, which reward files: 3 commands; 2 copies in (bash,
    # busybox) and 1 out (reward.txt)
    assert ops["exec_create"] == 3 and ops["extract-to-dir"] == 2 and ops["archive-path"] == 1, ops


@pytest.mark.parametrize("task_id", ["smoke__calc-1"])
def test_swebench_grade_defences_cost_one_command(tmp_path, monkeypatch, docker_engine, docker_base_image,
                                                   docker_run_label, task_id):
    """A gold patch graded in a fresh container with every defence on costs the engine one command
    more than with `log_only` (the snapshot, the checks' reads, the verdict share the grade's own
    commands), and the same uploads: the channel and the eval script go in with the patch."""
    from test_benchmark_grading import grade, make_cfg

    from sandbatch.tasks import get_task

    monkeypatch.chdir(tmp_path)
    smoke = Path(__file__).resolve().parent.parent / "data" / "smoke" / "tasks.jsonl"
    counts = {}
    for mode in ("neutralise", "log_only"):
        (tmp_path / mode).mkdir()
        cfg_path = make_cfg(tmp_path / mode, "smoke", smoke, run=docker_run_label, grading={"tampering": mode},
                            sandbox={"provider": "docker", "default_image": docker_base_image})
        task = get_task(config.Config.model_validate_json(cfg_path.read_text()).benchmark, task_id)
        with EngineEvents(docker_engine, docker_run_label) as events:
            rec = grade(cfg_path, task_id, task.patch)
        assert rec.resolved and rec.reward == 1.0 and rec.tampering == [], rec
        counts[mode] = events.count()
    on, off = counts["neutralise"], counts["log_only"]
    assert on["create"] == off["create"] == 1, counts
    assert on["exec_create"] - off["exec_create"] == 1, counts
    assert on["extract-to-dir"] == off["extract-to-dir"], counts
