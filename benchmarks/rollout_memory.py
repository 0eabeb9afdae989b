"""Peak RSS of the job processes of one running rollout (target <= 80 MB).

Runs one smoke task (oracle harness, local provider, one job at a time) and samples the
processes under Snakemake every 20 ms: the step's Python process and whatever it runs
(bash wrapper, git, the grader's pytest). Prints the peak of the step processes alone
and of all job processes together, per step.

    python benchmarks/rollout_memory.py [--task smoke__calc-1]
"""

from __future__ import annotations

import argparse
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="smoke__calc-1")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="sandbatch-mem-") as wd:
        cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", wd, "--cores", "1",
               "--config", f"benchmark={{'instance_ids': ['{a.task}']}}"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sm = psutil.Process(proc.pid)
        step_peak: dict[str, float] = defaultdict(float)  # the step's python process alone
        tree_peak: dict[str, float] = defaultdict(float)  # every job process at that moment
        sm_peak = 0.0
        while proc.poll() is None:
            try:
                sm_peak = max(sm_peak, sm.memory_info().rss)
                kids = sm.children(recursive=True)
            except psutil.NoSuchProcess:
                break
            total, current = 0.0, None
            for k in kids:
                try:
                    rss = k.memory_info().rss
                    total += rss
                    s = step_of(k.cmdline())
                    if s and k.name().startswith("python"):
                        current = s
                        step_peak[s] = max(step_peak[s], rss)
                except psutil.NoSuchProcess:
                    continue
            if current:
                tree_peak[current] = max(tree_peak[current], total)
            time.sleep(0.02)
        if proc.returncode != 0:
            print("the run failed", file=sys.stderr)
            return 1
    mb = 1024 * 1024
    print(f"{'step':10s}{'step process MB':>18s}{'all job processes MB':>24s}")
    for s in STEPS:
        if s in step_peak:
            print(f"{s:10s}{step_peak[s] / mb:18.1f}{tree_peak[s] / mb:24.1f}")
    worst = max(tree_peak.values()) / mb
    print(f"peak RSS of one rollout's job processes: {worst:.1f} MB (target <= 80); "
          f"step process alone: {max(step_peak.values()) / mb:.1f} MB; Snakemake itself: {sm_peak / mb:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
