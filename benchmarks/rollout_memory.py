"""Peak memory of the job processes of one running rollout (target <= 80 MB).

Runs one smoke task (oracle harness, local provider, one job at a time) and samples the
processes under Snakemake every 20 ms: each step's processes and whatever they run (bash
wrapper, git, the grader's pytest). Twice: with the step server (the default for local
runs: a step is a small client process plus a child forked from the server, whose own
memory is what it writes, its USS; the server's resident set is paid once per run, not
per rollout) and without it (SANDBATCH_NO_STEP_SERVER=1: the step is one Python process
with every import, its RSS). Prints the peak per step and overall.

    python benchmarks/rollout_memory.py [--task smoke__calc-1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
STEPS = ("sandbox", "harness", "convert", "patch", "grade", "aggregate")


def step_of(cmdline: list[str]) -> str | None:
    for part in cmdline:
        for s in STEPS:
            if part.endswith(f"/workflow/scripts/{s}.py"):
                return s
    return None


SERVER = "sandbatch.steps.forkserver"


def sample(task: str, server: bool) -> tuple[dict[str, float], dict[str, float], float, float]:
    """Peaks per step: (the step's own memory, every job process), Snakemake's RSS, the server's RSS."""
    env = dict(os.environ)
    env.pop("SANDBATCH_NO_STEP_SERVER", None)
    if not server:
        env["SANDBATCH_NO_STEP_SERVER"] = "1"
    with tempfile.TemporaryDirectory(prefix="sandbatch-mem-") as wd:
        cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", wd, "--cores", "1",
               "--config", f"benchmark={{'instance_ids': ['{task}']}}"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        sm = psutil.Process(proc.pid)
        step_peak: dict[str, float] = defaultdict(float)
        tree_peak: dict[str, float] = defaultdict(float)
        sm_peak = server_peak = forked_rss_peak = 0.0
        while proc.poll() is None:
            try:
                sm_peak = max(sm_peak, sm.memory_info().rss)
                kids = sm.children(recursive=True)
            except psutil.NoSuchProcess:
                break
            servers = set()
            for k in kids:
                try:
                    if SERVER in " ".join(k.cmdline()) and k.ppid() == sm.pid:
                        servers.add(k.pid)
                        server_peak = max(server_peak, k.memory_info().rss)
                except psutil.NoSuchProcess:
                    continue
            total, own, current = 0.0, 0.0, None
            for k in kids:
                if k.pid in servers:
                    continue
                try:
                    if k.ppid() in servers:  # a forked step: its pages are the server's until written
                        mem = k.memory_full_info().uss
                        forked_rss_peak = max(forked_rss_peak, k.memory_info().rss)
                        own += mem
                    else:
                        mem = k.memory_info().rss
                        s = step_of(k.cmdline())
                        if s and k.name().startswith("python"):
                            current = s
                            own += mem
                    total += mem
                except psutil.NoSuchProcess:
                    continue
            if current:
                step_peak[current] = max(step_peak[current], own)
                tree_peak[current] = max(tree_peak[current], total)
            time.sleep(0.02)
        if proc.returncode != 0:
            raise SystemExit("the run failed")
    return step_peak, tree_peak, sm_peak, server_peak, forked_rss_peak


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="smoke__calc-1")
    a = p.parse_args()
    mb = 1024 * 1024
    worst = {}
    for server in (True, False):
        step_peak, tree_peak, sm_peak, server_peak, forked_rss = sample(a.task, server)
        title = "with the step server" if server else "without it (SANDBATCH_NO_STEP_SERVER=1)"
        print(title)
        print(f"  {'step':10s}{'step MB':>12s}{'all job processes MB':>24s}")
        for s in STEPS:
            if s in step_peak:
                print(f"  {s:10s}{step_peak[s] / mb:12.1f}{tree_peak[s] / mb:24.1f}")
        worst[server] = max(tree_peak.values()) / mb
        extra = (f"; the step server (once per run): {server_peak / mb:.1f} MB; a forked step's RSS, "
                 f"which counts the pages it shares with the server: {forked_rss / mb:.1f} MB" if server else "")
        print(f"  peak of one rollout's job processes: {worst[server]:.1f} MB (target <= 80); "
              f"Snakemake itself: {sm_peak / mb:.1f} MB{extra}")
    print(f"ratio with/without the step server: {worst[True] / worst[False]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
