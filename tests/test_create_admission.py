"""Create admission: one token bucket for every step process of a run.

Separate processes (as the sandbox steps of a run are) create sandboxes on the
OpenSandbox stand-in through the real provider, drawing from one bucket file; the
stand-in records when each create request arrived.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("opensandbox")

from opensandbox_server import StandIn  # noqa: E402

from sandbatch.sandbox.admission import BURST, CreateAdmission, admission_for  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src"

# one step process: `n` creates at once through the provider, admitted by the run's bucket
WORKER = """
import asyncio, json, os, pathlib, sys
from sandbatch.sandbox import SandboxSpec, provider_class
from sandbatch.sandbox.admission import admission_for
args = json.loads(sys.argv[1])

async def main():
    async with provider_class("opensandbox")(args["options"]) as provider:
        provider.admission = admission_for(args["run_dir"], args["rate"])
        spec = SandboxSpec(image="python:3.11", labels={"run": args["label"]}, ttl_seconds=600)
        # warm up (imports, connections), then start together: what is measured is admission,
        # not how long 8 Python processes take to start on a loaded machine
        await provider.list({"run": args["label"]})
        ready = pathlib.Path(args["run_dir"], "ready")
        ready.mkdir(parents=True, exist_ok=True)
        (ready / str(os.getpid())).touch()
        while len(list(ready.iterdir())) < args["processes"]:
            await asyncio.sleep(0.05)
        made = await asyncio.gather(*(provider.create(spec) for _ in range(args["n"])))
        await asyncio.gather(*(sb.delete() for sb in made))

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    standin = StandIn.in_thread(tmp_path_factory.mktemp("opensandbox"))
    yield standin
    standin.stop()


def options(server):
    return {"connection": {"domain": server.domain, "api_key_env": None, "request_timeout": 10},
            "create": {"backoff_initial": 0.05, "backoff_max": 0.2, "ready_timeout": 10},
            "probe": {"interval": 0.05, "timeout": 20}}


def run_processes(server, run_dir, rate, processes, per_process):
    args = {"options": options(server), "run_dir": str(run_dir), "rate": rate, "n": per_process,
            "processes": processes,
            "label": f"admit-{run_dir.name}"[:40]}
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(args)], env={"PYTHONPATH": str(SRC)},
                              stderr=subprocess.PIPE, text=True) for _ in range(processes)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    return time.monotonic() - t0


def most_in_any_second(times):
    times = sorted(times)
    return max(sum(1 for t in times if start <= t < start + 1.0) for start in times)


def test_64_creates_from_8_processes_keep_the_run_rate(server, tmp_path):
    server.reset(sandboxes=True)
    took = run_processes(server, tmp_path / "run", rate=10, processes=8, per_process=8)
    stats = server.stats()
    times = stats["create_times"]
    assert len(times) == 64 and stats["live"] == 0
    assert took >= 6.0 and max(times) - min(times) >= (64 - BURST) / 10 * 0.95
    # a token bucket of 10/s and burst 1: never more than 10 + 1 creates in any second
    assert most_in_any_second(times) <= 10 + BURST
    print(f"\n64 creates from 8 processes at 10/s: {took:.1f} s, busiest second {most_in_any_second(times)}")


def test_429_and_503_slow_the_whole_run_down(server, tmp_path):
    server.reset(sandboxes=True)
    server.add_fault(op="create", action="status", status=429, retry_after=2, count=1)
    server.add_fault(op="create", action="status", status=503, count=1)
    run_dir = tmp_path / "run"
    run_processes(server, run_dir, rate=50, processes=2, per_process=5)
    times = sorted(server.stats()["create_times"])
    assert len(times) == 12 and server.stats()["live"] == 0  # 10 creates, 2 refused and retried
    # Retry-After: 2 held every process (a quick run at 50/s takes ~0.2 s): after the 429
    # nothing but creates already admitted arrives for 2 s
    assert max(b - a for a, b in zip(times, times[1:])) >= 2.0 * 0.9
    # the successes since won the configured rate back
    assert json.loads((run_dir / "_admission" / "create.json").read_text())["factor"] == 1.0


def test_bucket_state_is_shared_through_its_file(tmp_path):
    now = [100.0]
    a = CreateAdmission(tmp_path / "b.json", rate=2, clock=lambda: now[0])
    b = CreateAdmission(tmp_path / "b.json", rate=2, clock=lambda: now[0])
    assert a._try() == 0.0  # the burst
    assert b._try() == pytest.approx(0.5)  # the other process sees the bucket empty
    now[0] += 0.5
    assert b._try() == 0.0 and a._try() == pytest.approx(0.5)
    a.throttled(retry_after=3)
    assert b._try() == pytest.approx(3.0)  # held for the Retry-After
    now[0] += 3.0
    assert b._try() == pytest.approx(0.0, abs=1e-9) or b._try() > 0  # slowed: 1 token/s now
    state = json.loads((tmp_path / "b.json").read_text())
    assert state["factor"] == 0.5
    for _ in range(10):
        a.succeeded()
    assert json.loads((tmp_path / "b.json").read_text())["factor"] == 1.0
    assert admission_for(tmp_path, 5).path == tmp_path / "_admission" / "create.json"
