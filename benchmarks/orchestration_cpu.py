"""CPU seconds of the whole Snakemake process tree per rollout (target <= 1.0).

50 rollouts (the 5 smoke tasks x 10 repeats) with the `none` harness on the local
provider: what is measured is orchestration (Snakemake, step start-up, records), not an
agent. Twice, in fresh directories: as runs go (steps forked from the step server, which
is a child of Snakemake, so its CPU is in the tree), and with SANDBATCH_NO_STEP_SERVER=1
(every step a Python process of its own). Then where the time goes: a no-op rerun, and
the CPU of starting each step's script in a process of its own (`--help`: Python start-up
plus imports).

    python benchmarks/orchestration_cpu.py [--repeats 10] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = ("sandbox", "harness", "convert", "patch", "grade")


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def measure(cmd: list[str], cwd: Path, env: dict | None = None) -> tuple[float, float, subprocess.CompletedProcess]:
    cpu0, t0 = children_cpu(), time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    return children_cpu() - cpu0, time.monotonic() - t0, proc


def run(a, server: bool) -> tuple[Path, list[str], float, int]:
    """One full run in a fresh directory: (directory, command, CPU-s, rollouts)."""
    wd = (a.keep / ("server" if server else "no-server")) if a.keep else Path(tempfile.mkdtemp(prefix="sandbatch-cpu-"))
    wd.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "SANDBATCH_NO_STEP_SERVER"}
    if not server:
        env["SANDBATCH_NO_STEP_SERVER"] = "1"
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(wd), "--cores",
           str(a.cores), "--config", "harness={'name': 'none'}", f"repeats={a.repeats}", "run=cpu"]
    cpu, wall, proc = measure(cmd, wd, env)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(1)
    n = len((wd / "results/cpu/rollouts.jsonl").read_text().splitlines())
    how = "with the step server" if server else "without it (SANDBATCH_NO_STEP_SERVER=1)"
    print(f"{how}: rollouts {n}; wall {wall:.1f} s; CPU {cpu:.1f} s; CPU per rollout {cpu / n:.3f} s"
          + (" (target <= 1.0)" if server else ""))
    return wd, cmd, cpu, n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--keep", type=Path, help="run in this directory and keep it")
    a = p.parse_args()
    wd, cmd, cpu, n = run(a, server=True)
    wd_plain, _, cpu_plain, _ = run(a, server=False)
    print(f"ratio with/without the step server: {cpu / cpu_plain:.2f}")

    # where it goes: a no-op rerun (DAG + Snakemake start-up), and each step alone
    cpu_noop, wall_noop, _ = measure(cmd, wd)
    print(f"no-op rerun (start-up + DAG of {n} rollouts): CPU {cpu_noop:.2f} s, wall {wall_noop:.1f} s")
    print(f"per rollout beyond the no-op DAG cost: {(cpu - cpu_noop) / n:.3f} CPU-s with the step server, "
          f"{(cpu_plain - cpu_noop) / n:.3f} without")
    settings = wd / "results/cpu/_settings/run.json"
    task_id = sorted(p.name for p in (wd / "results/cpu").iterdir() if p.is_dir() and not p.name.startswith("_")
                     and p.name != "logs" and p.name != "report")[0]
    print("a step in a process of its own:")
    for step in STEPS:
        script = REPO / "workflow" / "scripts" / f"{step}.py"
        startup, _, _ = measure([sys.executable, str(script), "--help"], wd)
        print(f"  {step:8s} start-up + imports: {startup:.3f} CPU-s", end="")
        if step in ("convert",):  # rerunnable in place without side effects
            one, _, _ = measure([sys.executable, str(script), "--config", str(settings), "--task", task_id,
                                 "--repeat", "0"], wd)
            print(f"; one real run: {one:.3f} CPU-s", end="")
        print()
    if not a.keep:
        import shutil
        shutil.rmtree(wd, ignore_errors=True)
        shutil.rmtree(wd_plain, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
