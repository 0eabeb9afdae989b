"""Dry-run cost of a 12,000-rollout run (1,500 tasks x 8 repeats) vs a bare Snakefile.

Wall time and peak RSS of `snakemake -n` (targets: <= 1.3x the bare Snakefile with the
same rules and wildcards). Also prints the parse-path share: loading and validating the
task file (sandbatch.tasks.load_tasks) and the config, measured in-process.

    python benchmarks/dag_scale.py [--tasks 1500] [--repeats 8]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import write_bare, write_tasks  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def dry_run(snakefile: Path, wd: Path, *args: str) -> tuple[float, float, int]:
    """(wall s, peak RSS MB, jobs) of one `snakemake -n` in a fresh process."""
    cmd = ["/usr/bin/time", "-f", "TIME %e %M", sys.executable, "-m", "snakemake", "-s", str(snakefile), "-d",
           str(wd), "--cores", "2", "-n", "--quiet", "rules", "--workflow-profile", "none", *args]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    line = [l for l in proc.stderr.splitlines() if l.startswith("TIME ")][-1]
    _, _, rss_kb = line.split()
    total = [l for l in (proc.stdout + proc.stderr).splitlines() if l.startswith("total")]
    jobs = int(total[-1].split()[-1]) if total else -1
    return wall, int(rss_kb) / 1024, jobs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=1500)
    p.add_argument("--repeats", type=int, default=8)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="sandbatch-dag-") as tmp:
        d = Path(tmp)
        tasks = write_tasks(d / "tasks.jsonl", a.tasks)
        bare = write_bare(d, tasks, a.repeats, "scale")
        (d / "ours").mkdir()
        (d / "bare").mkdir()
        config = ["--config", f"benchmark={{'kind': 'swebench', 'tasks': '{tasks}'}}", f"repeats={a.repeats}",
                  "run=scale"]
        ours = dry_run(REPO / "Snakefile", d / "ours", *config)
        base = dry_run(bare, d / "bare")
        print(f"{a.tasks} tasks x {a.repeats} repeats = {a.tasks * a.repeats} rollouts; "
              f"task file {tasks.stat().st_size / 1e6:.1f} MB")
        print(f"sandbatch: {ours[0]:.1f} s, {ours[1]:.0f} MB peak RSS, {ours[2]} jobs")
        print(f"bare:      {base[0]:.1f} s, {base[1]:.0f} MB peak RSS, {base[2]} jobs")
        print(f"ratio: wall {ours[0] / base[0]:.2f}x, RSS {ours[1] / base[1]:.2f}x (targets <= 1.3x)")

        # the parse path alone, in-process
        from sandbatch.core.config import parse
        from sandbatch.tasks import load_tasks

        t0 = time.monotonic()
        cfg = parse({"benchmark": {"kind": "swebench", "tasks": str(tasks)}, "repeats": a.repeats, "run": "scale"})
        t1 = time.monotonic()
        n = len(load_tasks(cfg.benchmark))
        t2 = time.monotonic()
        print(f"parse path: config {t1 - t0:.2f} s, load_tasks ({n} tasks, validated) {t2 - t1:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
