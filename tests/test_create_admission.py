"""Create admission: one token bucket for every step process of a run.

Separate processes (as the sandbox steps of a run are) create sandboxes through the real
provider, drawing from one bucket file: on the OpenSandbox stand-in, which records when
each create request arrived (64 creates at once cost it nothing), and on the real server
behind the fault proxy (tests/opensandbox_proxy.py), which answers 429 and 503 and records
the arrivals there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


from opensandbox_proxy import FaultProxy  # noqa: E402
from opensandbox_server import StandIn  # noqa: E402
from real_opensandbox import IMAGE, os_run, real_opensandbox  # noqa: E402,F401 (fixtures)

from sandbatch.sandbox.admission import BURST, RECOVER, CreateAdmission, admission_for  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src"

# one step process: `n` creates at once through the provider, admitted by the run's bucket
WORKER = """
import asyncio, json, os, pathlib, sys, time
from sandbatch.sandbox import SandboxSpec, provider_class
from sandbatch.sandbox.admission import admission_for
args = json.loads(sys.argv[1])

async def main():
    async with provider_class("opensandbox")(args["options"]) as provider:
        provider.admission = admission = admission_for(args["run_dir"], args["rate"])
        # when each token was granted, by the bucket's own clock: what the bucket promises (the
        # server's arrival times add the network's and a loaded machine's delays to it)
        granted, take = [], admission._try
        def _try():
            wait = take()
            if wait == 0.0:
                granted.append(time.time())
            return wait
        admission._try = _try
        spec = SandboxSpec(image=args["image"], labels={"run": args["label"]}, ttl_seconds=600)
        # warm up (imports, connections), then start together: what is measured is admission,
        # not how long 8 Python processes take to start on a loaded machine
        await provider.list({"run": args["label"]})
        ready = pathlib.Path(args["run_dir"], "ready")
        ready.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args["run_dir"], "granted").mkdir(exist_ok=True)
        (ready / str(os.getpid())).touch()
        while len(list(ready.iterdir())) < args["processes"]:
            await asyncio.sleep(0.05)
        made = await asyncio.gather(*(provider.create(spec) for _ in range(args["n"])))
        await asyncio.gather(*(sb.delete() for sb in made))
        pathlib.Path(args["run_dir"], "granted", str(os.getpid())).write_text(json.dumps(granted))

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


def run_processes(server, run_dir, rate, processes, per_process, *, opts=None, label=None, image="python:3.11"):
    """`processes` step processes making `per_process` sandboxes each (on the stand-in
    unless `opts` says where), then deleting them; the seconds it took."""
    args = {"options": opts or options(server), "run_dir": str(run_dir), "rate": rate, "n": per_process,
            "processes": processes, "image": image,
            "label": label or f"admit-{run_dir.name}"[:40]}
    t0 = time.monotonic()
    env = {"PYTHONPATH": str(SRC), **{k: v for k, v in os.environ.items() if k.startswith("SANDBATCH_TEST_")}}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(args)], env=env,
                              stderr=subprocess.PIPE, text=True) for _ in range(processes)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    return time.monotonic() - t0


def granted(run_dir: Path) -> list[float]:
    """When the bucket granted each create, over every process of the run."""
    return sorted(t for f in (run_dir / "granted").iterdir() for t in json.loads(f.read_text()))


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
    # a token bucket of 10/s and burst 1: never more than 10 + 1 grants in any second (the
    # server's arrivals may bunch up behind a loaded machine's delays; the grants may not)
    grants = granted(tmp_path / "run")
    assert len(grants) == 64 and most_in_any_second(grants) <= 10 + BURST, most_in_any_second(grants)
    print(f"\n64 creates from 8 processes at 10/s: {took:.1f} s, busiest second {most_in_any_second(grants)} "
          f"granted, {most_in_any_second(times)} arrived")


@pytest.mark.slow
def test_429_and_503_on_the_real_server_slow_the_whole_run_down(tmp_path, real_opensandbox, os_run):
    """The real server behind the fault proxy: the run's first create is answered 429 with
    Retry-After: 2, the next 503 without one. No create reaches the server for the 2 s, each
    answer halves the rate for every process and holds creates (for one interval at the
    slowed rate after the 503), and every sandbox is made and deleted (os_run checks none
    is left)."""
    rate, processes, per_process = 4, 2, 3
    with FaultProxy(real_opensandbox.url) as proxy:
        proxy.add_fault(op="create", action="status", status=429, retry_after=2, count=1)
        proxy.add_fault(op="create", action="status", status=503, count=1)
        run_processes(None, tmp_path / "run", rate, processes, per_process, image=IMAGE, label=os_run,
                      opts=real_opensandbox.options(proxy.domain))
        stats = proxy.stats()
    too_many, unavailable, *created = sorted(stats["arrivals"]["create"])  # the faults fire on the first two
    assert stats["faults_fired"] == {"create:status": 2}
    assert len(created) == processes * per_process and stats["requests"]["delete"] == processes * per_process
    # Retry-After honoured by every process: nothing reached the server for 2 s
    assert unavailable - too_many >= 2.0 * 0.95, unavailable - too_many
    # halved twice, to rate / 4: held for one interval at that rate after the 503, and the
    # next create one interval after the first (no create has succeeded yet to win the rate
    # back: each takes about a second here)
    slowed = 1 / (rate / 4)
    assert created[0] - unavailable >= slowed * 0.9, created[0] - unavailable
    assert created[1] - created[0] >= slowed * 0.8, created[1] - created[0]
    # each success since won a step of the rate back
    factor = json.loads((tmp_path / "run" / "_admission" / "create.json").read_text())["factor"]
    assert factor == pytest.approx(min(1.0, 0.25 * RECOVER ** len(created)))
    print(f"\n429, 503, then {len(created)} creates at {rate}/s on the real server: 503 after "
          f"{unavailable - too_many:.2f} s, first create {created[0] - unavailable:.2f} s later, "
          f"gaps {[round(y - x, 2) for x, y in zip(created, created[1:])]}")


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
