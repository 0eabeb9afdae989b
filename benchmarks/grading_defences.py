"""Grading time the tampering defences add per rollout, on the bundled smoke tasks.

    python benchmarks/grading_defences.py [--repeats 5] [--keep DIR]

Grades each smoke task's gold patch with the real grade step on the local provider, with
the defences on (grading.tampering: neutralise: path neutralisation, the verdict channel,
runner integrity, log consistency, the rootdir check) and off (log_only: the log alone, as
the benchmarks' own harnesses read it), alternating on and off so both see the same load.
Two figures per grade: the step's `tests` phase, wall-clock (apply the patch, neutralise,
run the tests, read and check the results; the sandbox's create and delete are the same
either way), and the CPU time of the whole grade, this process and the commands it ran
(on a shared machine wall-clock swings by more than the difference; CPU time does not).
Prints, per task and over all, the medians, and the added time as a share of the grade
without defences (target: under 5 %); checks that every grade resolved.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
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


def cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def grade_once(cfg_path: Path, task_id: str, patch: str, repeat: int) -> tuple[GradeRecord, float]:
    """The grade.json of the real grade step on `patch`, and the CPU seconds it took."""
    ctx = StepContext(cfg_path, task_id, repeat, 1, 1)
    ctx.path(PATCH).parent.mkdir(parents=True, exist_ok=True)
    ctx.path(PATCH).write_text(patch, encoding="utf-8")
    PatchRecord(bytes=len(patch), empty=not patch.strip(), sandbox_deleted=True).save(ctx.path(PATCH_INFO))
    start = cpu()
    asyncio.run(run_step(GradeStep(ctx)))
    return load(GradeRecord, ctx.path(GRADE)), cpu() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--keep", type=Path, help="grade under this directory and keep it (default: a temporary one)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="grading-defences-"))
    work.mkdir(parents=True, exist_ok=True)
    cfgs = {mode: settings(work, mode) for mode in ("neutralise", "log_only")}
    rows = [json.loads(line) for line in SMOKE.read_text().splitlines()]
    modes = ("neutralise", "log_only")
    wall = {r["instance_id"]: {m: [] for m in modes} for r in rows}
    cpus = {r["instance_id"]: {m: [] for m in modes} for r in rows}
    bad = []
    for mode in modes:  # warm-up, not counted: the first grade of a process imports the grading libraries
        grade_once(cfgs[mode], rows[0]["instance_id"], rows[0]["patch"], args.repeats)
    for i in range(args.repeats):
        for row in rows:
            for mode in modes if i % 2 == 0 else modes[::-1]:
                rec, took = grade_once(cfgs[mode], row["instance_id"], row["patch"], i)
                if not rec.resolved or rec.tampering:
                    bad.append((row["instance_id"], mode, rec.status, rec.tampering))
                wall[row["instance_id"]][mode].append(rec.phases["tests"])
                cpus[row["instance_id"]][mode].append(took)
    print(f"grading per rollout, median of {args.repeats}: tests phase wall-clock | whole grade CPU (seconds)")
    print(f"{'task':24} {'off':>7} {'on':>7} {'added':>8} | {'off':>7} {'on':>7} {'added':>8}")

    def line(name: str, w: dict[str, list[float]], c: dict[str, list[float]]) -> tuple[float, float]:
        (won, woff), (con, coff) = ((statistics.median(x["neutralise"]), statistics.median(x["log_only"]))
                                    for x in (w, c))
        print(f"{name:24} {woff:7.3f} {won:7.3f} {(won - woff) / woff:+8.1%} | {coff:7.3f} {con:7.3f} "
              f"{(con - coff) / coff:+8.1%}")
        return (won - woff) / woff, (con - coff) / coff

    for task in wall:
        line(task, wall[task], cpus[task])
    pooled = [{m: [v for t in d.values() for v in t[m]] for m in modes} for d in (wall, cpus)]
    share_wall, share_cpu = line("all", *pooled)
    print(f"added by the defences: {share_wall:+.1%} wall-clock, {share_cpu:+.1%} CPU "
          f"(target < {TARGET:.0%}: {'met' if share_cpu < TARGET else 'NOT met'} in CPU time)")
    if bad:
        print(f"{len(bad)} gold grades did not resolve cleanly: {bad[:3]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
