"""How busy the sandbox slots are: a run's wall time against the physical limit.

N rollouts at concurrency C whose agent lasts exactly T seconds cannot finish before
ceil(N/C) x T. This runs the real workflow (the repository's profile, as a user would)
with the `oracle` harness held to T seconds (`harness.config.hold_seconds`) on the smoke
tasks, or with `--harness mini-swe-agent`: mini in host mode against the scripted model
(benchmarks/scripted.py, `--turns` model turns whose looks sleep so that the agent lasts
about T), then reads the records and prints:

- the peaks over the run of its whole process tree (Snakemake, the step server and its
  forked steps, the sandboxes' commands), sampled every `--sample` seconds: memory as PSS
  (a page shared by N processes counts 1/N: forked pages are not counted twice), open file
  descriptors, processes and tasks (threads, what a pids cgroup and `ulimit -u` count;
  Snakemake's own apart); and what one host can therefore hold at once (per rollout at
  the peak, against this machine's memory and limits);

- wall (the whole `snakemake` command) and the first step's start to the last grade's end,
  the ideal ceil(N/C) x T and their ratios;
- the CPU seconds of the run's process tree (Snakemake, the steps, and on the local
  provider the sandboxes' commands and tests): divided by the cores, the wall the CPU
  alone needs, the other physical limit on one machine;
- the mean busy slots over the run (rollouts between their sandbox's creation and the end
  of their grading) and the mean number of agents running, against C;
- per rollout, the time outside the agent and the tests, by phase: create, prepare,
  install, patch (extract), grade-sandbox create and prepare, delete (agent and grading
  sandbox; 0 where a step deletes after its record, as steps do now, the delete then
  falls into the next gap unless the step server reported the job done first), the rest
  of each step, and the gaps between a rollout's jobs (Snakemake noticing a job's end,
  selecting and starting the next, its process start-up).

    python benchmarks/utilisation.py                          # local: N=256, C=64, T=20 s
    python benchmarks/utilisation.py --provider docker        # N=24, C=8
    python benchmarks/utilisation.py --provider docker -n 8 -c 1
    python benchmarks/utilisation.py --provider opensandbox   # the server at SANDBATCH_TEST_OPENSANDBOX_URL
    python benchmarks/utilisation.py -n 8 -c 4 -t 2 --runs 2  # small; twice
    python benchmarks/utilisation.py -n 500 -c 500            # 500 at once (oracle)
    python benchmarks/utilisation.py -n 500 -c 500 --harness mini-swe-agent

The machine's load average is printed before and after: figures on a shared machine are
noisy, compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scripted import mini_harness, serve  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SMOKE_TASKS = 5  # rows of data/smoke/tasks.jsonl
DEFAULTS = {"local": (256, 64), "docker": (24, 8), "opensandbox": (24, 8)}
OPENSANDBOX_URL = os.environ.get("SANDBATCH_TEST_OPENSANDBOX_URL", "http://127.0.0.1:18080")
OPENSANDBOX_KEY = os.environ.get("SANDBATCH_TEST_OPENSANDBOX_KEY", "opensandbox-test-key")
KEY_ENV = "SANDBATCH_BENCH_OPENSANDBOX_KEY"

# (label, how it is read from one rollout's records); the rows sum to the time outside
# the agent and the tests
PHASES = (
    ("create", lambda r: _ph(r["sandbox"], "create") + _ph(r["harness"], "create")),
    ("prepare", lambda r: _ph(r["sandbox"], "prepare") + _ph(r["harness"], "prepare")),
    ("sandbox step, rest", lambda r: _rest(r["sandbox"], "create", "prepare")),
    ("gap sandbox -> harness", lambda r: _gap(r["sandbox"], r["harness"])),
    ("install", lambda r: r["harness"].get("install_s") or 0.0),
    ("harness step, rest", lambda r: _rest(r["harness"], "create", "prepare")
     - (r["harness"].get("install_s") or 0.0) - (r["harness"].get("agent_s") or 0.0)),
    ("gap harness -> patch", lambda r: _gap(r["harness"], r["patch"])),
    ("patch (extract)", lambda r: _ph(r["patch"], "extract")),
    ("delete agent sandbox", lambda r: _ph(r["patch"], "delete")),
    ("patch step, rest", lambda r: _rest(r["patch"], "extract", "delete")),
    ("gap patch -> grade", lambda r: _gap(r["patch"], r["grade"])),
    ("grade-sandbox create", lambda r: _ph(r["grade"], "create")),
    ("grade-sandbox prepare", lambda r: _ph(r["grade"], "prepare")),
    ("delete grading sandbox", lambda r: _ph(r["grade"], "delete")),
    ("grade step, rest", lambda r: _rest(r["grade"], "create", "prepare", "tests", "delete")),
)
STEPS = ("sandbox", "harness", "patch", "grade")


def _ts(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def _ph(rec: dict, name: str) -> float:
    return float((rec.get("phases") or {}).get(name, 0.0))


def _rest(rec: dict, *phases: str) -> float:
    return float(rec["duration_s"]) - sum(_ph(rec, p) for p in phases)


def _gap(before: dict, after: dict) -> float:
    return _ts(after["started_at"]) - _ts(before["finished_at"])


def config_for(a, run: str, model_url: str | None = None) -> dict:
    tasks = max(k for k in range(1, SMOKE_TASKS + 1) if a.n % k == 0)
    cfg = {"run": run, "repeats": a.n // tasks, "concurrency": a.c, "retries": 0,
           "benchmark": {"limit": tasks},
           "harness": {"name": "oracle", "config": {"hold_seconds": a.t}},
           "timeouts": {"agent": a.t + 600}}
    if model_url:
        cfg["harness"], cfg["model"] = mini_harness(model_url)
    if a.provider == "docker":
        cfg["sandbox"] = {"provider": "docker", "default_image": "sandbatch/base:bookworm"}
    elif a.provider == "opensandbox":
        scheme, _, domain = OPENSANDBOX_URL.partition("://")
        cfg["sandbox"] = {"provider": "opensandbox", "default_image": "sandbatch/base:bookworm",
                          "opensandbox": {"connection": {"domain": domain, "protocol": scheme, "api_key_env": KEY_ENV}}}
    return cfg


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class Peaks:
    """Samples a process tree on a thread: peak PSS, open descriptors, processes and tasks
    (threads: what a pids cgroup and `ulimit -u` count), and Snakemake's own threads."""

    def __init__(self, root: int, every: float):
        self.root, self.every = root, every
        self.pss = self.fds = self.procs = self.tasks = self.own = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> "Peaks":
        self._stop.set()
        self._thread.join()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                tree = [psutil.Process(self.root)]
                tree += tree[0].children(recursive=True)
            except psutil.Error:
                return
            pss = fds = tasks = 0
            for proc in tree:
                pss += _pss(proc.pid)
                try:
                    fds += proc.num_fds()
                    threads = proc.num_threads()
                except psutil.Error:
                    continue
                tasks += threads
                if proc.pid == self.root:
                    self.own = max(self.own, threads)
            self.pss, self.fds, self.procs = max(self.pss, pss), max(self.fds, fds), max(self.procs, len(tree))
            self.tasks = max(self.tasks, tasks)
            self.samples += 1


def _pss(pid: int) -> int:
    """Proportional set size in bytes (0 for a process already gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_once(a, wd: Path, model_url: str | None = None) -> tuple[float, float, Path, Peaks]:
    run = f"util-{a.provider}-{uuid.uuid4().hex[:6]}"  # its sandboxes' labels are this run's alone
    cfg = wd / "utilisation.json"
    cfg.write_text(json.dumps(config_for(a, run, model_url)))  # JSON is YAML
    # the repository's profile, as a run from the checkout gets it; --cores only counts jobs
    # here (sandboxes are capped by `concurrency`), so it must not be what limits them
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(wd),
           "--workflow-profile", str(REPO / "profiles" / "default"), "--cores", str(2 * a.c),
           "--configfile", str(cfg)]
    env = {**os.environ, KEY_ENV: OPENSANDBOX_KEY}
    cpu0, t0 = children_cpu(), time.monotonic()
    with open(wd / "snakemake.log", "w+") as log:
        proc = subprocess.Popen(cmd, cwd=wd, stdout=log, stderr=subprocess.STDOUT, env=env)
        peaks = Peaks(proc.pid, a.sample)
        code = proc.wait()
        peaks.stop()
        wall, cpu = time.monotonic() - t0, children_cpu() - cpu0
        if code != 0:
            log.seek(0)
            print(log.read()[-4000:], file=sys.stderr)
            raise SystemExit(f"the run failed (exit {code}); its directory: {wd}")
    return wall, cpu, wd / "results" / run, peaks


def load_rollouts(run_dir: Path) -> list[dict]:
    rows = []
    for sandbox in sorted(run_dir.glob("*/*/sandbox.json")):
        d = sandbox.parent
        rows.append({step: json.loads((d / f"{step}.json").read_text()) for step in STEPS})
    return rows


def report(a, wall: float, cpu: float, rows: list[dict], peaks: Peaks) -> None:
    n, c, t = len(rows), a.c, a.t
    ideal = math.ceil(n / c) * t
    bad = [r for r in rows if any(r[s].get("status") == "infra_error" for s in STEPS)]
    unresolved = sum(1 for r in rows if not r["grade"].get("resolved"))
    start = min(_ts(r["sandbox"]["started_at"]) for r in rows)
    end = max(_ts(r["grade"]["finished_at"]) for r in rows)
    spans = [_ts(r["grade"]["finished_at"]) - _ts(r["sandbox"]["started_at"]) for r in rows]
    agents = [float(r["harness"].get("agent_s") or 0.0) for r in rows]
    tests = [_ph(r["grade"], "tests") for r in rows]
    outside = [s - ag - te for s, ag, te in zip(spans, agents, tests)]
    print(f"{a.provider}, {a.harness}: N={n} rollouts, C={c}, T={t:g} s; {unresolved} unresolved, "
          f"{len(bad)} infra errors")
    print(f"  wall {wall:.1f} s; ideal ceil(N/C) x T = {ideal:.0f} s; ratio {wall / ideal:.3f}")
    print(f"  first step start -> last grade end {end - start:.1f} s; ratio {(end - start) / ideal:.3f} "
          f"(the rest is Snakemake start-up, DAG and the aggregate)")
    cores = os.cpu_count() or 1
    print(f"  CPU of the run's process tree {cpu:.0f} s ({cpu / n:.2f} s per rollout): on {cores} cores at least "
          f"{cpu / cores:.0f} s of wall with the machine to itself (sandboxes on this host count here)")
    gb, per = 1 << 30, min(n, c)
    mem = psutil.virtual_memory().total
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    print(f"  peaks of the process tree ({peaks.samples} samples, every {a.sample:g} s): PSS {peaks.pss / gb:.2f} GB, "
          f"{peaks.fds} open descriptors, {peaks.procs} processes, {peaks.tasks} tasks (threads; Snakemake's own "
          f"{peaks.own}); per rollout at once: {peaks.pss / per / (1 << 20):.0f} MB, {peaks.fds / per:.1f} "
          f"descriptors, {peaks.procs / per:.1f} processes, {(peaks.tasks - peaks.own) / per:.1f} tasks besides "
          f"Snakemake's")
    if peaks.pss:
        print(f"  so one host of {cores} cores and {mem / gb:.0f} GB holds about {int(0.9 * mem * per / peaks.pss)} "
              f"such rollouts at once by memory (90 %); CPU: {cores / (cpu / n) * t:.0f} rollouts of T={t:g} s "
              f"at once keep its cores busy; descriptors (the processes' sum; each process has its own limit, "
              f"{nofile} here) and processes (pid_max {Path('/proc/sys/kernel/pid_max').read_text().strip()}) "
              f"grow by the per-rollout figures above")
    print(f"  mean busy slots {sum(spans) / wall:.1f} of {c} over the wall ({sum(spans) / (end - start):.1f} "
          f"between first and last step); agents running {sum(agents) / wall:.1f}")
    print(f"  per rollout: span {statistics.mean(spans):.2f} s = agent {statistics.mean(agents):.2f} "
          f"+ tests {statistics.mean(tests):.2f} + outside {statistics.mean(outside):.2f} "
          f"(p50 {statistics.median(outside):.2f}, max {max(outside):.2f})")
    print(f"  outside the agent and the tests, by phase (s per rollout): {'mean':>6} {'p50':>6} {'p95':>6}")
    total = 0.0
    for label, read in PHASES:
        values = sorted(read(r) for r in rows)
        total += statistics.mean(values)
        p95 = values[min(len(values) - 1, int(0.95 * len(values)))]
        print(f"    {label:26s} {statistics.mean(values):6.3f} {statistics.median(values):6.3f} {p95:6.3f}")
    print(f"    {'sum':26s} {total:6.3f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--provider", choices=sorted(DEFAULTS), default="local")
    p.add_argument("-n", type=int, help="rollouts (default: local 256, docker and opensandbox 24)")
    p.add_argument("-c", type=int, help="concurrency (default: local 64, docker and opensandbox 8)")
    p.add_argument("-t", type=float, default=20.0, help="seconds the agent holds its sandbox (default 20)")
    p.add_argument("--harness", choices=("oracle", "mini-swe-agent"), default="oracle",
                   help="mini-swe-agent: host mode against the scripted model")
    p.add_argument("--turns", type=int, default=4, help="mini-swe-agent: model turns per rollout (default 4)")
    p.add_argument("--sample", type=float, default=2.0, help="seconds between samples of the process tree")
    p.add_argument("--runs", type=int, default=1, help="run this many times, each in a fresh directory")
    p.add_argument("--keep", type=Path, help="run in DIR/<i> and keep it")
    a = p.parse_args()
    a.n = a.n or DEFAULTS[a.provider][0]
    a.c = a.c or DEFAULTS[a.provider][1]
    for i in range(a.runs):
        wd = (a.keep / str(i)) if a.keep else Path(tempfile.mkdtemp(prefix="sandbatch-util-"))
        wd.mkdir(parents=True, exist_ok=True)
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        if a.harness == "mini-swe-agent":  # the looks sleep: the agent lasts about T
            with serve(a.turns, a.t / max(1, a.turns - 2)) as url:
                wall, cpu, run_dir, peaks = run_once(a, wd, url)
        else:
            wall, cpu, run_dir, peaks = run_once(a, wd)
        print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        report(a, wall, cpu, load_rollouts(run_dir), peaks)
        if not a.keep:
            shutil.rmtree(wd, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
