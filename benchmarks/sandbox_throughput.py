"""Throughput of the opensandbox provider: create + probe + exec + delete per sandbox.

Two servers, side by side (`--server`, both by default):

- the REAL OpenSandbox server (tests/real_opensandbox.py finds it; Docker runtime on this
  host): what a run here gets, bound by the server and Docker, not by the client. One
  wave of `--real-sandboxes` (64) at concurrency 64; its sandboxes carry a run label of
  their own and are reaped at the end.
- the local stand-in (tests/opensandbox_server, in its own process) with a fixed latency
  injected into every lifecycle call, compared with the latency-bound ideal: each sandbox
  needs three lifecycle round trips one after the other (create; the endpoint lookups,
  which go out in parallel; delete) and at most C run at once, so no schedule beats
  ceil(N / C) * 3 * latency. Probe and exec go to execd, which gets no injected latency.
  This isolates the client: its CPU time is printed beside the wall time; one event loop
  cannot finish faster than the CPU it needs, so when that exceeds the ideal the run is
  CPU-bound, not latency-bound. So are the stand-in's and its commands' (a `bash -c` per
  command): on this host they share the client's cores, as a remote server would not.

    python benchmarks/sandbox_throughput.py                  # both
    python benchmarks/sandbox_throughput.py --server real    # 64 real sandboxes, concurrency 64

Needs the test extra (aiohttp). Prints its figures; exits 1 if a sandbox failed or any
was left behind.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from opensandbox_server import StandIn  # noqa: E402
from real_opensandbox import IMAGE, KEY, KEY_ENV, URL, RealServer, reap_run, unavailable, unique_run  # noqa: E402

from sandbatch.sandbox import SandboxSpec, provider_class  # noqa: E402

ROUND_TRIPS = 3  # create, endpoints (parallel), delete


async def lifecycle(provider, spec: SandboxSpec, gate: asyncio.Semaphore, phases: dict[str, list[float]]) -> None:
    async with gate:
        t0 = time.monotonic()
        sandbox = await provider.create(spec)  # includes the probe
        t1 = time.monotonic()
        try:
            result = await sandbox.exec("echo work", timeout=30)
            if result.stdout != "work\n":
                raise RuntimeError(f"unexpected output {result.stdout!r}")
        finally:
            t2 = time.monotonic()
            await sandbox.delete()
        t3 = time.monotonic()
        phases["create+probe"].append(t1 - t0)
        phases["exec"].append(t2 - t1)
        phases["delete"].append(t3 - t2)
        phases["total"].append(t3 - t0)


async def bench(server: StandIn, n: int, concurrency: int, latency: float) -> dict:
    options = {
        "connection": {"domain": server.domain, "api_key_env": None, "max_connections": 2 * concurrency},
        "probe": {"interval": 0.05},
    }
    async with provider_class("opensandbox")(options) as provider:
        await lifecycle(provider, SandboxSpec(image="bench", labels={"run": "warmup"}),
                        asyncio.Semaphore(1), {k: [] for k in ("create+probe", "exec", "delete", "total")})
        server.configure(latency={"lifecycle": latency})
        phases: dict[str, list[float]] = {k: [] for k in ("create+probe", "exec", "delete", "total")}
        gate = asyncio.Semaphore(concurrency)
        specs = [SandboxSpec(image="bench", labels={"run": "bench", "task": f"t{i}"}) for i in range(n)]
        stats0 = server.stats()
        cpu0, start = time.process_time(), time.monotonic()
        outcomes = await asyncio.gather(*(lifecycle(provider, s, gate, phases) for s in specs),
                                        return_exceptions=True)
        wall = time.monotonic() - start
        cpu = time.process_time() - cpu0
    stats = server.stats()
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    ideal = -(-n // concurrency) * ROUND_TRIPS * latency
    return {
        "n": n, "concurrency": concurrency, "latency": latency, "wall": wall, "ideal": ideal,
        "throughput": (n - len(failures)) / wall, "ideal_throughput": n / ideal, "ratio": ideal / wall,
        "client_cpu": cpu, "server_cpu": stats["server_cpu_s"] - stats0["server_cpu_s"],
        "commands_cpu": stats["commands_cpu_s"] - stats0["commands_cpu_s"], "failures": failures,
        "left": stats["live"], "phases": phases, "load": os.getloadavg(),
    }


async def bench_real(real: RealServer, n: int, concurrency: int) -> dict:
    run = unique_run("bench")
    options = real.options(connection={"max_connections": 2 * concurrency})
    phases: dict[str, list[float]] = {k: [] for k in ("create+probe", "exec", "delete", "total")}
    async with provider_class("opensandbox")(options) as provider:
        await lifecycle(provider, SandboxSpec(image=IMAGE, labels={"run": run}), asyncio.Semaphore(1),
                        {k: [] for k in phases})  # warm-up: connections, the server's caches
        gate = asyncio.Semaphore(concurrency)
        specs = [SandboxSpec(image=IMAGE, labels={"run": run, "task": f"t{i}"}, ttl_seconds=600) for i in range(n)]
        cpu0, start = time.process_time(), time.monotonic()
        outcomes = await asyncio.gather(*(lifecycle(provider, s, gate, phases) for s in specs),
                                        return_exceptions=True)
        wall = time.monotonic() - start
        cpu = time.process_time() - cpu0
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    return {"n": n, "concurrency": concurrency, "wall": wall, "throughput": (n - len(failures)) / wall,
            "client_cpu": cpu, "failures": failures, "phases": phases, "load": os.getloadavg(), "run": run}


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else (values or [0])[0]


def print_phases(phases: dict[str, list[float]]) -> None:
    for name, values in phases.items():
        if values:
            print(f"  {name:<13} p50 {pct(values, 50) * 1000:7.0f} ms  p95 {pct(values, 95) * 1000:7.0f} ms")


def run_real(args) -> bool:
    why = unavailable()
    if why is not None:
        print(f"real server: {why}")
        return False
    os.environ.setdefault(KEY_ENV, KEY)
    real = RealServer(URL, KEY)
    r = asyncio.run(bench_real(real, args.real_sandboxes, args.concurrency))
    left = reap_run(real, r["run"])
    print(f"REAL server {URL}: sandboxes {r['n']}  concurrency {r['concurrency']}  image {IMAGE}")
    print(f"wall {r['wall']:.2f} s  throughput {r['throughput']:.2f}/s")
    print_phases(r["phases"])
    print(f"client cpu {r['client_cpu']:.2f} s ({r['client_cpu'] / r['n'] * 1000:.1f} ms/sandbox, "
          f"{r['client_cpu'] / r['wall'] * 100:.0f}% of one core)  "
          f"load average {r['load'][0]:.2f} on {os.cpu_count()} cpus")
    print(f"failures {len(r['failures'])}  sandboxes left {len(left)}")
    for failure in r["failures"][:3]:
        print(f"  {type(failure).__name__}: {failure}")
    return not r["failures"] and not left


def run_standin(args) -> bool:
    # sandbox roots in memory where there is a tmpfs: on this host's disk the stand-in's
    # directories for one sandbox cost ~2 ms CPU, which a remote server does not charge here
    scratch = tempfile.TemporaryDirectory(prefix="opensandbox-standin-",
                                          dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    server = StandIn.in_subprocess(scratch.name)
    try:
        r = asyncio.run(bench(server, args.sandboxes, args.concurrency, args.latency))
    finally:
        server.stop()
        scratch.cleanup()

    print(f"STAND-IN: sandboxes {r['n']}  concurrency {r['concurrency']}  "
          f"latency per lifecycle call {r['latency'] * 1000:.0f} ms")
    print(f"wall {r['wall']:.2f} s  ideal {r['ideal']:.2f} s  "
          f"throughput {r['throughput']:.1f}/s  ideal {r['ideal_throughput']:.1f}/s  ratio {r['ratio']:.2f} "
          f"(target >= {args.target})")
    print_phases(r["phases"])
    bound = "CPU-bound: client cpu > ideal" if r["client_cpu"] > r["ideal"] else "latency-bound"
    print(f"client cpu {r['client_cpu']:.2f} s ({r['client_cpu'] / r['n'] * 1000:.1f} ms/sandbox; {bound})  "
          f"server cpu {r['server_cpu']:.2f} s + its commands {r['commands_cpu']:.2f} s  "
          f"load average {r['load'][0]:.2f} on {os.cpu_count()} cpus")
    print(f"failures {len(r['failures'])}  sandboxes left {r['left']}")
    for failure in r["failures"][:3]:
        print(f"  {type(failure).__name__}: {failure}")
    print("PASS" if r["ratio"] >= args.target else "BELOW TARGET")
    return not r["failures"] and not r["left"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=("both", "real", "standin"), default="both")
    parser.add_argument("--sandboxes", type=int, default=200, help="sandboxes on the stand-in")
    parser.add_argument("--real-sandboxes", type=int, default=64, help="sandboxes on the real server")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.1, help="seconds injected per stand-in lifecycle call")
    parser.add_argument("--target", type=float, default=0.8, help="stand-in ratio to the ideal to call it a pass")
    args = parser.parse_args()
    ok = True
    if args.server in ("both", "real"):
        ok = run_real(args) and ok
    if args.server == "both":
        print()
    if args.server in ("both", "standin"):
        ok = run_standin(args) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
