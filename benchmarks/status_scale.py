"""`sandbatch status` on 12,000 rollouts (1,500 synthetic tasks x 8 repeats).

Lays out a run whose rollouts are done, half-done and pending (records copied from a
template with SWE-bench-sized grade.json files: 2,000 test results each, and the record
index the steps append), then times the status collection cold-ish (first call) and
warm, and reports the time per rollout.

    python benchmarks/status_scale.py [--tasks 1500] [--repeats 8]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import write_tasks  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=1500)
    p.add_argument("--repeats", type=int, default=8)
    a = p.parse_args()
    from sandbatch.core.config import parse
    from sandbatch.core.ids import path_id
    from sandbatch.contracts.records import INDEX, SUMMARY
    from sandbatch.ops.status import collect, render

    with tempfile.TemporaryDirectory(prefix="sandbatch-status-") as tmp:
        wd = Path(tmp)
        tasks = write_tasks(wd / "tasks.jsonl", a.tasks)
        cfg = parse({"run": "big", "repeats": a.repeats, "benchmark": {"kind": "swebench", "tasks": str(tasks)}})
        run_dir = wd / "results" / "big"
        (run_dir / "_settings").mkdir(parents=True)
        (run_dir / "_settings" / "run.json").write_text(cfg.model_dump_json())
        rec = lambda **kw: json.dumps({"status": "ok", "failure_class": None, "error": None,  # noqa: E731
                                       "started_at": "2026-01-01T00:00:00", "duration_s": 12.5, **kw}, indent=2)
        grade = rec(resolved=True, reward=1.0, test_results={f"tests/test_m.py::test_{i}": "PASSED"
                                                             for i in range(2000)})
        files = {"sandbox.json": rec(), "harness.json": rec(), "response.json": "{}", "patch.json": rec(),
                 "grade.json": grade}
        # the index lines Record.save appends before each record (response.json is not a Record)
        index = "".join(json.dumps({"record": name, **{k: v for k, v in json.loads(files[name]).items()
                                                      if k in SUMMARY}}) + "\n"
                        for name in files if name != "response.json")
        ids = [path_id(json.loads(l)["instance_id"]) for l in open(tasks)]
        t0 = time.monotonic()
        n = 0
        for i, tid in enumerate(ids):
            for r in range(a.repeats):
                d = run_dir / tid / str(r)
                d.mkdir(parents=True)
                k = (i * a.repeats + r) % 4  # 1/4 pending, the rest done up to grade
                for name in list(files)[: 5 if k else 0]:
                    (d / name).write_text(files[name])
                if k:
                    (d / INDEX).write_text(index)
                n += 1
        size = sum(f.stat().st_size for f in run_dir.rglob("*.json")) / 1e6
        print(f"laid out {n} rollouts ({size:.0f} MB of records) in {time.monotonic() - t0:.1f} s")
        os.system("sync")
        for label in ("first call", "second call"):
            t0 = time.monotonic()
            st = collect("big", "results", wd)
            dt = time.monotonic() - t0
            print(f"{label}: {dt:.2f} s ({1e3 * dt / n:.3f} ms per rollout); done {st.done}/{st.rollouts}")
        print(render(st).splitlines()[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
