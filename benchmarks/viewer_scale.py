"""The trajectory viewer on 2,000 rollouts (250 synthetic tasks x 8 repeats).

Lays out a run whose rollouts carry SWE-bench-sized records (a 40-item conversation with
20 tool calls and 1-6 KB outputs, a 3 KB patch, 53 graded tests, 20 model calls), builds
the viewer (`sandbatch.reporting.view.build`), and loads the index and one rollout page in headless
Chromium: the page's own clock (performance.now() after its scripts ran and its layout is
computed, median of 3 loads), for the index as shipped (rows rendered 100 at a time as
they scroll into view) and for the same index rendering every row at once.

    python benchmarks/viewer_scale.py [--tasks 250] [--repeats 8]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import write_tasks  # noqa: E402

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def rollout_files(d: Path, rnd: random.Random) -> None:
    from sandbatch.rollout import responses

    words = "def return self value none import assert error test path line file".split()
    text = lambda k: " ".join(rnd.choice(words) for _ in range(k))  # noqa: E731
    items = []
    for i in range(20):
        items.append(responses.message(text(30)))
        items.append(responses.function_call(f"call_{i}", "bash", {"command": f"grep -n {text(3)} src/*.py"}))
        items.append(responses.function_call_output(f"call_{i}", "\n".join(text(12) for _ in range(rnd.randint(10, 60)))))
    (d / "response.json").write_text(json.dumps(responses.response(
        items, {**responses.usage(180_000, 6_000), "model_calls": 20}, "m", "completed", {})))
    tests = [f"tests/test_m.py::test_{j}" for j in range(53)]
    (d / "grade.json").write_text(json.dumps({
        "status": "ok", "reward": 1.0, "resolved": True, "tests_ran": True, "patch_applied": True,
        "tests_status": {"FAIL_TO_PASS": {"success": tests[:3], "failure": []},
                         "PASS_TO_PASS": {"success": tests[3:], "failure": []}},
        "test_results": dict.fromkeys(tests, "PASSED")}))
    (d / "patch.diff").write_text("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,40 +1,40 @@\n"
                                  + "".join(f"-{text(8)}\n+{text(8)}\n" for _ in range(40)))
    (d / "model_calls.jsonl").write_text("".join(json.dumps(
        {"endpoint": "chat", "status": 200, "latency_s": 1.5,
         "usage": {"prompt_tokens": 9000, "completion_tokens": 300, "cached_tokens": 8000}}) + "\n" for _ in range(20)))
    (d / "grade.log").write_text("\n".join(text(10) for _ in range(400)))


CLOCK = "<script>document.body.offsetHeight; document.title = 'ms=' + performance.now();</script></body>"


def load_ms(chromium: str, page: Path, profile: Path, n: int = 3) -> float:
    """Median milliseconds from navigation start until the page's scripts ran and it is laid out."""
    timed = page.with_name(page.stem + "-timed.html")
    timed.write_text(page.read_text().replace("</body>", CLOCK))
    times = []
    for _ in range(n):
        out = subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", timed.as_uri()],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-1000:]
        times.append(float(re.search(r"<title>ms=([\d.]+)</title>", out.stdout).group(1)))
    return statistics.median(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=250)
    p.add_argument("--repeats", type=int, default=8)
    a = p.parse_args()
    from sandbatch.contracts.row import RolloutRow
    from sandbatch.core.config import parse
    from sandbatch.tasks import select_tasks
    from sandbatch.reporting.view import build

    chromium = shutil.which("chromium")
    with tempfile.TemporaryDirectory(prefix="sandbatch-view-") as tmp:
        wd = Path(tmp)
        tasks = write_tasks(wd / "tasks.jsonl", a.tasks)
        cfg = parse({"run": "big", "repeats": a.repeats, "results_dir": str(wd / "results"),
                     "benchmark": {"kind": "swebench", "tasks": str(tasks)}})
        rnd, rows = random.Random(0), []
        for t in select_tasks(cfg.benchmark):
            for r in range(a.repeats):
                d = cfg.run_dir / t.id / str(r)
                d.mkdir(parents=True)
                rollout_files(d, rnd)
                rows.append(RolloutRow(
                    run=cfg.run, task_id=t.id, instance_id=t.instance_id, repo=t.repo, repeat=r,
                    status=rnd.choice(["ok", "ok", "ok", "agent_error", "timeout", "infra_error"]),
                    failure_class=None, failed_phase=None, reward=float(rnd.random() < .4), resolved=False,
                    harness="opencode", exit_code=0, usage={"total_tokens": rnd.randint(50_000, 400_000)},
                    durations={"sandbox": 3.0, "harness": rnd.uniform(60, 900), "patch": 1.0, "grade": 30.0},
                    dir=str(d)))
        out = wd / "view"
        t0 = time.monotonic()
        index = build(cfg, rows, out)
        dt = time.monotonic() - t0
        pages = list((out / "rollouts").rglob("*.html"))
        total = sum(f.stat().st_size for f in pages) / 1e6
        print(f"built the viewer of {len(rows)} rollouts in {dt:.1f} s ({1e3 * dt / len(rows):.1f} ms per rollout)")
        print(f"index.html {index.stat().st_size / 1e3:.0f} KB; {len(pages)} rollout pages, "
              f"{total:.0f} MB ({1e3 * total / len(pages):.0f} KB each)")
        if chromium is None:
            print("chromium not installed: page load times not measured")
            return 0
        eager = out / "index-eager.html"
        eager.write_text(index.read_text().replace("CHUNK = 100", "CHUNK = 1e9"))
        profile = wd / "profile"
        print("loaded and laid out in headless Chromium (median of 3):")
        print(f"  index, 100 rows rendered, the rest on scroll: {load_ms(chromium, index, profile):.0f} ms")
        print(f"  index, all {len(rows)} rows rendered at once: {load_ms(chromium, eager, profile):.0f} ms")
        print(f"  one rollout page ({pages[0].stat().st_size / 1e3:.0f} KB): {load_ms(chromium, pages[0], profile):.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
