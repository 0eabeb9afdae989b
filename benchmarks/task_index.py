"""How much the task table costs at parse time: N synthetic SWE-bench rows (about the size
of real Verified rows), the index built cold and read warm, and `snakemake -n` on them.

    python benchmarks/task_index.py [N]      (default 1500)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sandbatch import REPO_ROOT
from sandbatch.core import config
from sandbatch import tasks as tasks_mod


def rows(n: int):
    body = "x" * 6000  # patches, test patches and the issue text of a real row: a few KB
    for i in range(n):
        yield {"instance_id": f"org__repo-{i}", "repo": "astropy/astropy", "base_commit": "0" * 40, "version": "4.3",
               "problem_statement": body, "patch": f"diff --git a/a.py b/a.py\n{body}\n",
               "test_patch": f"diff --git a/t.py b/t.py\n{body}\n", "hints_text": body,
               "FAIL_TO_PASS": json.dumps([f"t.py::test_{j}" for j in range(5)]),
               "PASS_TO_PASS": json.dumps([f"t.py::test_p{j}" for j in range(40)])}


def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        path = tmp / "tasks.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows(n)))
        print(f"{n} rows, {path.stat().st_size / 1e6:.1f} MB")
        os.chdir(tmp)
        cfg = config.load([], {"benchmark": {"kind": "swebench", "tasks": str(path)}},
                          default=REPO_ROOT / "config" / "default.yaml")
        t0 = time.perf_counter()
        tasks_mod.select_tasks(cfg.benchmark)
        t1 = time.perf_counter()
        tasks_mod._index.cache_clear()
        tasks_mod.select_tasks(cfg.benchmark)
        t2 = time.perf_counter()
        tasks_mod.get_task(cfg.benchmark, f"org__repo-{n - 1}")
        t3 = time.perf_counter()
        print(f"index cold (parse + validate every row): {t1 - t0:.2f} s")
        print(f"index warm (cached file):                {t2 - t1:.3f} s")
        print(f"one task by offset (a step's read):      {t3 - t2:.3f} s")
        for label in ("cold", "warm"):
            if label == "cold":
                for f in (tmp / ".snakemake" / "sandbatch" / "index").glob("*.json"):
                    f.unlink()
            t = time.perf_counter()
            res = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO_ROOT / "Snakefile"), "-d", str(tmp),
                                  "-n", "-q", "--cores", "2", "--config", f'benchmark={{"kind": "swebench", '
                                  f'"tasks": "{path}"}}'], capture_output=True, text=True)
            assert res.returncode == 0, res.stderr[-2000:]
            print(f"snakemake -n, index {label}: {time.perf_counter() - t:.1f} s ({5 * n + 1 + 3} jobs)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1500)
