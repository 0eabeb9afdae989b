"""Host CPU of a host-mode mini-swe-agent rollout against an oracle rollout (target <= 1.5x),
and per model turn (target <= 50 ms).

The real workflow on the local provider, the smoke tasks (default 3 tasks x 2 repeats),
three runs in fresh directories: the `oracle` harness, and mini-swe-agent in host mode
against the scripted model (benchmarks/scripted.py: look around, apply the gold patch,
submit) in `--turns` model turns and in `--turns + --more` turns. Measured: the CPU of the
whole Snakemake process tree (Snakemake, the step server and its forked steps, the
sandboxes' commands and tests); the scripted model runs on a thread of this process and is
not counted. Printed: CPU per rollout of each run, the mini/oracle ratio, and per model
turn both the marginal cost (the difference of the two mini runs over the extra turns: flat
in the turn count means this does not grow with --more) and the excess over the oracle
divided by the turns.

    python benchmarks/mini_cpu.py [--tasks 3] [--repeats 2] [--turns 4] [--more 8]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from orchestration_cpu import measure  # noqa: E402
from scripted import mini_harness, serve  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def run(a, label: str, harness: dict, model: dict | None = None, extra: dict | None = None,
        inspect=None) -> float:
    """CPU-s per rollout of one run in a fresh directory (`extra`: more config sections;
    `inspect(run_dir, rows)` is called before the directory is removed)."""
    wd = Path(tempfile.mkdtemp(prefix=f"sandbatch-mini-cpu-{label}-"))
    cfg = {"run": label, "repeats": a.repeats, "concurrency": a.concurrency, "retries": 0,
           "benchmark": {"limit": a.tasks}, "harness": harness, **(extra or {})}
    if model:
        cfg["model"] = model
    (wd / "run.json").write_text(json.dumps(cfg))  # JSON is YAML
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(wd), "--cores",
           str(a.cores), "--configfile", str(wd / "run.json")]
    cpu, wall, proc = measure(cmd, wd)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"the {label} run failed (exit {proc.returncode}); its directory: {wd}")
    rows = [json.loads(line) for line in (wd / "results" / label / "rollouts.jsonl").read_text().splitlines()]
    unresolved = sum(1 for r in rows if not r.get("resolved"))
    print(f"{label}: {len(rows)} rollouts ({unresolved} unresolved); wall {wall:.1f} s; CPU {cpu:.1f} s; "
          f"CPU per rollout {cpu / len(rows):.3f} s", flush=True)
    if unresolved:
        raise SystemExit(f"the {label} run left rollouts unresolved; its directory: {wd}")
    if inspect is not None:
        inspect(wd / "results" / label, rows)
    shutil.rmtree(wd, ignore_errors=True)
    return cpu / len(rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=3, help="smoke tasks (1-5)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--turns", type=int, default=4, help="model turns per mini rollout (>= 2)")
    p.add_argument("--more", type=int, default=8, help="extra turns of the second mini run")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=2)
    a = p.parse_args()
    oracle = run(a, "oracle", {"name": "oracle"})
    per_run = {}
    for turns in (a.turns, a.turns + a.more):
        with serve(turns) as url:
            harness, model = mini_harness(url)
            per_run[turns] = run(a, f"mini-{turns}-turns", harness, model)
    mini, longer = per_run[a.turns], per_run[a.turns + a.more]
    print(f"mini-swe-agent ({a.turns} turns) / oracle, host CPU per rollout: {mini / oracle:.2f}x (target <= 1.5)")
    print(f"per model turn, marginal ({a.turns} -> {a.turns + a.more} turns): "
          f"{1000 * (longer - mini) / a.more:.0f} ms (target <= 50)")
    print(f"per model turn, excess over the oracle / {a.turns} turns: {1000 * (mini - oracle) / a.turns:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
