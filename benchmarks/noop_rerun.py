"""No-op rerun of a finished 1,000-rollout run vs a bare Snakefile (target <= 1.2x).

The finished state is laid out directly (every output file, in dependency order of
modification times) for both workflows, so both reruns find nothing to do; neither has
Snakemake metadata, which keeps the comparison symmetric. Prints wall time and CPU of
`snakemake --cores 2` for each.

    python benchmarks/noop_rerun.py [--tasks 200] [--repeats 5]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import write_bare, write_tasks  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ROLLOUT_FILES = ("sandbox.json", "events.jsonl", "harness.json", "model_calls.jsonl", "response.json", "trajectory.json",
                 "patch.diff", "patch.json", "grade.json")


def lay_out(wd: Path, run: str, ids: list[str], repeats: int, summary: list[str]) -> None:
    """Create every output with mtimes in dependency order (settings < rollout records < summary)."""
    t = time.time() - 3600
    run_dir = wd / "results" / run

    def touch(path: Path, when: float) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}\n")
        os.utime(path, (when, when))

    for name in ("run", "agent", "grade", "aggregate"):
        touch(run_dir / "_settings" / f"{name}.json", t)
    for i, name in enumerate(ROLLOUT_FILES):
        for tid in ids:
            for r in range(repeats):
                touch(run_dir / tid / str(r) / name, t + 10 * (i + 1))
    for name in summary:
        touch(wd / name, t + 200)


def rerun(cmd: list[str]) -> tuple[float, float, str]:
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0 or "Nothing to be done" not in out:
        raise SystemExit("not a no-op rerun:\n" + out[-3000:])
    return wall, ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime, out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="sandbatch-noop-") as tmp:
        d = Path(tmp)
        tasks = write_tasks(d / "tasks.jsonl", a.tasks)
        bare = write_bare(d, tasks, a.repeats, "noop")
        ids = (d / "ids.txt").read_text().split()
        base = [sys.executable, "-m", "snakemake", "--cores", "2", "--workflow-profile", "none"]
        config = ["--config", f"benchmark={{'kind': 'swebench', 'tasks': '{tasks}'}}", f"repeats={a.repeats}",
                  "run=noop"]
        ours_wd, bare_wd = d / "ours", d / "bare"
        # the real workflow's summary outputs, as its dry run lists them for the aggregate
        dry = subprocess.run([*base, "-s", str(REPO / "Snakefile"), "-d", str(ours_wd), "-n", "--until",
                              "aggregate", "--quiet", "progress", *config], capture_output=True, text=True)
        summary = []
        for line in (dry.stdout + dry.stderr).splitlines():
            if line.strip().startswith("output:") and "results/noop/" in line and "/_settings/" not in line:
                outs = [s.strip() for s in line.split(":", 1)[1].split(",")]
                if all(o.count("/") <= 3 or "/report/" in o for o in outs) and "rollouts.jsonl" in line:
                    summary = outs
        if not summary:
            raise SystemExit("could not find the aggregate's outputs in the dry run:\n" + dry.stdout[-2000:])
        lay_out(ours_wd, "noop", ids, a.repeats, summary)
        lay_out(bare_wd, "noop", ids, a.repeats, ["results/noop/rollouts.jsonl"])
        ours = rerun([*base, "-s", str(REPO / "Snakefile"), "-d", str(ours_wd), *config])
        bare_r = rerun([*base, "-s", str(bare), "-d", str(bare_wd)])
        n = a.tasks * a.repeats
        print(f"no-op rerun of {n} finished rollouts ({5 * n + 5} jobs' outputs present)")
        print(f"sandbatch: wall {ours[0]:.2f} s, CPU {ours[1]:.2f} s")
        print(f"bare:      wall {bare_r[0]:.2f} s, CPU {bare_r[1]:.2f} s")
        print(f"ratio: wall {ours[0] / bare_r[0]:.2f}x, CPU {ours[1] / bare_r[1]:.2f}x (target <= 1.2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
