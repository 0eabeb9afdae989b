"""Grading time the tampering defences add per rollout, on the bundled smoke tasks.

    python benchmarks/grading_defences.py [--repeats 5] [--keep DIR]

Grades each smoke task's gold patch with the real grade step on the local provider, with
the defences on (grading.tampering: neutralise: path neutralisation, the verdict channel,
runner integrity, log consistency, the rootdir check) and off (log_only: the log alone, as
the benchmarks' own harnesses read it), alternating on and off so both see the same load.
The figure is the step's `tests` phase (apply the patch, neutralise, run the tests, read
and check the results); the sandbox's create and delete are the same either way. Prints,
per task and over all, the median of each and the added time as a share of the run
without defences (target: under 5 %), and checks that every grade resolved.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path

from sandbatch import REPO_ROOT, config
from sandbatch.records import GRADE, PATCH, PATCH_INFO, GradeRecord, PatchRecord, load
from sandbatch.steps.common import StepContext, run_step
from sandbatch.steps.grade import GradeStep

SMOKE = REPO_ROOT / "data" / "smoke" / "tasks.jsonl"
TARGET = 0.05


def settings(work: Path, mode: str) -> Path:
    cfg = config.load([], {"run": f"bench-{mode}", "results_dir": str(work / "results"), "retries": 0,
                           "benchmark": {"kind": "smoke", "tasks": str(SMOKE)}, "grading": {"tampering": mode},
                           "sandbox": {"provider": "local", "local": {"root": str(work / "sb")}}},
                      default=REPO_ROOT / "config" / "default.yaml")
    path = work / f"run-{mode}.json"
    path.write_text(cfg.model_dump_json(), encoding="utf-8")
    return path


def grade_once(cfg_path: Path, task_id: str, patch: str, repeat: int) -> GradeRecord:
    ctx = StepContext(cfg_path, task_id, repeat, 1, 1)
    ctx.path(PATCH).parent.mkdir(parents=True, exist_ok=True)
    ctx.path(PATCH).write_text(patch, encoding="utf-8")
    PatchRecord(bytes=len(patch), empty=not patch.strip(), sandbox_deleted=True).save(ctx.path(PATCH_INFO))
    asyncio.run(run_step(GradeStep(ctx)))
    return load(GradeRecord, ctx.path(GRADE))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--keep", type=Path, help="grade under this directory and keep it (default: a temporary one)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="grading-defences-"))
    work.mkdir(parents=True, exist_ok=True)
    cfgs = {mode: settings(work, mode) for mode in ("neutralise", "log_only")}
    rows = [json.loads(line) for line in SMOKE.read_text().splitlines()]
    times: dict[str, dict[str, list[float]]] = {r["instance_id"]: {"neutralise": [], "log_only": []} for r in rows}
    bad = []
    for i in range(args.repeats):
        for row in rows:
            order = ("neutralise", "log_only") if i % 2 == 0 else ("log_only", "neutralise")
            for mode in order:
                rec = grade_once(cfgs[mode], row["instance_id"], row["patch"], i)
                if not rec.resolved or rec.tampering:
                    bad.append((row["instance_id"], mode, rec.status, rec.tampering))
                times[row["instance_id"]][mode].append(rec.phases["tests"])
    print(f"grading time per rollout, tests phase, median of {args.repeats} (seconds):")
    print(f"{'task':24} {'defences off':>13} {'on':>8} {'added':>8} {'share':>7}")
    on_all, off_all = [], []
    for task, t in times.items():
        on, off = statistics.median(t["neutralise"]), statistics.median(t["log_only"])
        on_all += t["neutralise"]
        off_all += t["log_only"]
        print(f"{task:24} {off:13.3f} {on:8.3f} {on - off:+8.3f} {(on - off) / off:+7.1%}")
    on, off = statistics.median(on_all), statistics.median(off_all)
    share = (on - off) / off
    print(f"{'all':24} {off:13.3f} {on:8.3f} {on - off:+8.3f} {share:+7.1%}  "
          f"(target < {TARGET:.0%}: {'met' if share < TARGET else 'NOT met'})")
    if bad:
        print(f"{len(bad)} gold grades did not resolve cleanly: {bad[:3]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
