"""CPU seconds of the whole Snakemake process tree per rollout (target <= 1.0).

50 rollouts (the 5 smoke tasks x 10 repeats) with the `none` harness on the local
provider: what is measured is orchestration (Snakemake, step start-up, records), not an
agent. Also prints the CPU cost of starting each step's script (`--help`, i.e. Python
start-up plus imports) and of one real step, to show where the time goes.

    python benchmarks/orchestration_cpu.py [--repeats 10] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
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


def measure(cmd: list[str], cwd: Path) -> tuple[float, float, subprocess.CompletedProcess]:
    cpu0, t0 = children_cpu(), time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    return children_cpu() - cpu0, time.monotonic() - t0, proc


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--keep", type=Path, help="run in this directory and keep it")
    a = p.parse_args()
    wd = a.keep or Path(tempfile.mkdtemp(prefix="sandbatch-cpu-"))
    wd.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(wd), "--cores",
           str(a.cores), "--config", "harness={'name': 'none'}", f"repeats={a.repeats}", "run=cpu"]
    cpu, wall, proc = measure(cmd, wd)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return 1
    n = len((wd / "results/cpu/rollouts.jsonl").read_text().splitlines())
    print(f"rollouts: {n}; wall {wall:.1f} s; CPU {cpu:.1f} s; CPU per rollout {cpu / n:.3f} s (target <= 1.0)")

    # where it goes: a no-op rerun (DAG + Snakemake start-up), and each step alone
    cpu_noop, wall_noop, _ = measure(cmd, wd)
    print(f"no-op rerun (start-up + DAG of {n} rollouts): CPU {cpu_noop:.2f} s, wall {wall_noop:.1f} s")
    settings = wd / "results/cpu/_settings/run.json"
    task = json.loads(settings.read_text())
    task_id = sorted(p.name for p in (wd / "results/cpu").iterdir() if p.is_dir() and not p.name.startswith("_")
                     and p.name != "logs" and p.name != "report")[0]
    for step in STEPS:
        script = REPO / "workflow" / "scripts" / f"{step}.py"
        startup, _, _ = measure([sys.executable, str(script), "--help"], wd)
        print(f"  {step:8s} start-up + imports: {startup:.3f} CPU-s", end="")
        if step in ("convert",):  # rerunnable in place without side effects
            one, _, _ = measure([sys.executable, str(script), "--config", str(settings), "--task", task_id,
                                 "--repeat", "0"], wd)
            print(f"; one real run: {one:.3f} CPU-s", end="")
        print()
    per_job = (cpu - cpu_noop) / n
    print(f"per rollout beyond the no-op DAG cost: {per_job:.3f} CPU-s over {len(STEPS)} step jobs")
    if not a.keep:
        import shutil
        shutil.rmtree(wd, ignore_errors=True)
    del task
    return 0


if __name__ == "__main__":
    sys.exit(main())
