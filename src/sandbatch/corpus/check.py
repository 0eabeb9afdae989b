"""The corpus through the real workflow on Docker: for every row, its gold patch and its
comment-only patch (`noop_patch`), each applied by the `oracle` harness, graded with every
defence on (the default config) and with `grading.tampering: log_only`. A row is graded
right when its gold patch resolves with no tampering entry, its no-op does not resolve,
and both modes agree.

    python -m sandbatch.corpus check [ROW ...] [--workdir DIR] [--cores N]

Four real Snakemake runs (gold and noop, in each mode) per benchmark kind among the rows
(`swebench`; `swebench_pro` for SWE-bench Pro rows) in one working directory; each row's
image is built first when the engine lacks it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from ..core import resources
from . import rows
from .build import build

MODES = ("neutralise", "log_only")  # the default config's grading.tampering, and every defence off
PATCHES = ("gold", "noop")


def _run(workdir: Path, name: str, tasks: Path, mode: str, cores: int, timeout: float,
         kind: str = "swebench") -> dict[str, dict]:
    cfg = workdir / f"{name}.json"
    settings = {"run": name, "harness": {"name": "oracle"}, "retries": 0,
                "benchmark": {"kind": kind, "tasks": str(tasks)}, "sandbox": {"provider": "docker"}}
    if mode != "neutralise":
        settings["grading"] = {"tampering": mode}
    cfg.write_text(json.dumps(settings))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(resources.snakefile()), "-d", str(workdir),
                           "--cores", str(cores), "--configfile", str(cfg)], capture_output=True, text=True,
                          timeout=timeout, cwd=workdir)
    if proc.returncode != 0:
        raise RuntimeError(f"snakemake run {name} failed:\n{proc.stderr[-3000:]}")
    out = {}
    for line in (workdir / "results" / name / "rollouts.jsonl").read_text().splitlines():
        r = json.loads(line)
        grade = json.loads((workdir / r["dir"] / "grade.json").read_text())
        out[r["instance_id"]] = {"resolved": bool(r["resolved"]), "reward": r["reward"], "status": r["status"],
                                 "failure_class": r["failure_class"], "tampering": grade.get("tampering") or [],
                                 "verdict": (grade.get("report") or {}).get("verdict"),
                                 "tests_s": (grade.get("phases") or {}).get("tests"),
                                 "grade_s": grade.get("duration_s")}
    return out


def check(ids: list[str] | None = None, workdir: Path | None = None, cores: int = 2,
          timeout: float = 7200) -> dict:
    """{"build_s": {row: seconds, None when present}, "grades": {row: {mode: {patch: grade}}}, "runs": [run names],
    "wrong": [what is graded wrong]}"""
    selected = rows(ids)
    workdir = workdir or Path(tempfile.mkdtemp(prefix="sandbatch-corpus-check-"))
    workdir.mkdir(parents=True, exist_ok=True)
    build_s = {r.id: build(r)[1] for r in selected}
    grades: dict[str, dict] = {r.id: {m: {} for m in MODES} for r in selected}
    runs = []
    for kind in sorted({r.kind for r in selected}):
        of_kind = [r for r in selected if r.kind == kind]
        prefix = "" if kind == "swebench" else f"{kind}-".replace("_", "-")
        for which in PATCHES:
            lines = [json.dumps(r.task(None if which == "gold" else r.data["noop_patch"])) for r in of_kind]
            (workdir / f"{prefix}{which}.jsonl").write_text("\n".join(lines) + "\n")
        for mode in MODES:
            for which in PATCHES:
                runs.append(f"{prefix}{which}-{mode}".replace("_", "-"))
                got = _run(workdir, runs[-1], workdir / f"{prefix}{which}.jsonl", mode, cores, timeout, kind)
                for rid, g in got.items():
                    grades[rid][mode][which] = g
    wrong = []
    for rid, by_mode in grades.items():
        for mode, g in by_mode.items():
            if not (g["gold"]["resolved"] and g["gold"]["reward"] == 1.0):
                wrong.append(f"{rid} ({mode}): the gold patch is not resolved ({g['gold']['failure_class']}, "
                             f"{g['gold']['tampering']})")
            elif g["gold"]["tampering"]:
                wrong.append(f"{rid} ({mode}): the gold patch has tampering entries {g['gold']['tampering']}")
            if g["noop"]["resolved"] or g["noop"]["reward"]:
                wrong.append(f"{rid} ({mode}): the comment-only patch resolves")
        if {by_mode[m][p]["resolved"] for m in MODES for p in ("gold",)} != {True} or \
                by_mode["neutralise"]["noop"]["resolved"] != by_mode["log_only"]["noop"]["resolved"]:
            wrong.append(f"{rid}: the defences and log_only disagree")
    return {"workdir": str(workdir), "runs": runs, "build_s": build_s, "grades": grades, "wrong": wrong}


def _seconds(took: float | None) -> str:
    """A `tests` phase's seconds; `-` for a grade that never ran its tests (an infrastructure error,
    listed among the WRONG lines below)."""
    return "-" if took is None else f"{took:.1f}"


def main_args(args) -> int:
    res = check(args.ids or None, Path(args.workdir) if args.workdir else None, args.cores)
    print(f"{'row':<32} {'build':>8} {'gold':>9} {'noop':>9} {'tests s (on/off)':>17}")
    for rid, by_mode in res["grades"].items():
        b = res["build_s"][rid]
        on, off = by_mode["neutralise"], by_mode["log_only"]
        print(f"{rid:<32} {'present' if b is None else f'{b:.0f} s':>8} "
              f"{'/'.join('1' if on[p]['resolved'] else '0' for p in ('gold',)) + '/' + ('1' if off['gold']['resolved'] else '0'):>9} "
              f"{('1' if on['noop']['resolved'] else '0') + '/' + ('1' if off['noop']['resolved'] else '0'):>9} "
              f"{_seconds(on['gold']['tests_s']):>8}/{_seconds(off['gold']['tests_s']):<8}")
    for w in res["wrong"]:
        print(f"WRONG: {w}")
    print(f"results: {res['workdir']}")
    return 1 if res["wrong"] else 0
