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

- on docker and opensandbox, the CPU of every part besides the process tree, sampled while
  the run goes (a container's or a shim's total goes with it): the run's containers (their
  cgroups; which ones from the engine's create events and the run's label), the containerd
  shims with the runc processes they wait for, dockerd, containerd, the OpenSandbox server,
  and the benchmark process (the scripted model, its samplers' own CPU left out); the CPU
  floor (all of it / the cores), the idle time (wall x cores - all of it), what the machine
  did meanwhile (/proc/stat: what is not this run's is the noise), a timeline of busy cores
  and the steps running, and where the rollouts' time went, largest first: the records'
  phases and gaps, and with traces (on with --row) the spans of the sandbox operations
  (create, admission, probe, exec) and the steps.

With `--row ID` the tasks are N repeats of one corpus row (corpus/ID, its image built:
`python -m sandbatch.corpus build ID`), graded as SWE-bench in fresh sandboxes; its looks do
not sleep (T=0 unless -t): the agent is as fast as its commands and model calls, so the
run is what the orchestration and the tests cost. `--before DIR` runs another tree of the
project (`git archive REV | tar -x -C DIR`) alternately with this one and prints both.

    python benchmarks/utilisation.py --provider opensandbox --harness mini-swe-agent \
        --row pytest-dev__pytest-5262 -n 8 -c 8 [--before /tmp/before]
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


def config_for(a, run: str, model_url: str | None = None, tasks_file: Path | None = None) -> dict:
    tasks = max(k for k in range(1, SMOKE_TASKS + 1) if a.n % k == 0)
    cfg = {"run": run, "repeats": a.n // tasks, "concurrency": a.c, "retries": 0,
           "benchmark": {"limit": tasks},
           "harness": {"name": "oracle", "config": {"hold_seconds": a.t}},
           "timeouts": {"agent": a.t + 600}}
    if tasks_file is not None:  # one corpus row, N repeats of it, on its own image
        cfg["repeats"], cfg["benchmark"] = a.n, {"kind": "swebench", "tasks": str(tasks_file)}
    if a.traces:
        cfg["traces"] = {"exporters": ["file"]}
    if model_url:
        cfg["harness"], cfg["model"] = mini_harness(model_url)
    if a.provider == "docker":
        cfg["sandbox"] = {"provider": "docker", "default_image": "sandbatch/base:bookworm"}
    elif a.provider == "opensandbox":
        scheme, _, domain = OPENSANDBOX_URL.partition("://")
        cfg["sandbox"] = {"provider": "opensandbox", "default_image": "sandbatch/base:bookworm",
                          "opensandbox": {"connection": {"domain": domain, "protocol": scheme, "api_key_env": KEY_ENV},
                                          # the test server has no egress sidecar (tests/real_opensandbox.py)
                                          "network_policy": False}}
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


# --- the host's side: containers, engine, OpenSandbox server, the machine -------------------

TICK = os.sysconf("SC_CLK_TCK")
CGROUP_V1 = Path("/sys/fs/cgroup/cpuacct/docker")  # cgroupfs driver: docker/<id>/cpuacct.usage
CGROUP_V2 = Path("/sys/fs/cgroup/system.slice")  # systemd driver: docker-<id>.scope/cpu.stat
DAEMONS = ("dockerd", "containerd")
SHIM = "containerd-shim"  # comm cut to 15 characters; its runc children are in its waited CPU
SERVER = "opensandbox-server"  # in the server's command line


def _stat(pid: int) -> tuple[str, float] | None:
    """(comm, own + waited children's CPU s) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    f = text[text.rindex(")") + 2:].split()
    return text[text.index("(") + 1:text.rindex(")")], sum(int(x) for x in f[11:15]) / TICK


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _container_usage() -> dict[str, float]:
    """CPU seconds so far of every running container, by full id (its cgroup goes with it)."""
    out = {}
    if CGROUP_V1.is_dir():
        for d in CGROUP_V1.iterdir():
            try:
                out[d.name] = int((d / "cpuacct.usage").read_text()) / 1e9
            except (OSError, ValueError):
                pass
    else:
        for stat in CGROUP_V2.glob("docker-*.scope/cpu.stat"):
            try:
                out[stat.parent.name[7:-6]] = int(stat.read_text().split("usage_usec ")[1].split()[0]) / 1e6
            except (OSError, ValueError, IndexError):
                pass
    return out


def _machine() -> tuple[float, float]:
    """(busy, idle) CPU seconds of the whole machine since boot (/proc/stat)."""
    f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = f[3] + f[4]
    return (sum(f[:8]) - idle) / TICK, idle / TICK


class Host:
    """Samples, on a thread, what the run costs outside its own process tree: the CPU of every
    container (cgroups; a container's total is lost when it is removed, so the last sample
    counts), of the containerd shims (with the runc processes they wait for), of dockerd,
    containerd and the OpenSandbox server (before and after: long-lived), and the machine's
    busy time per sample (/proc/stat), for the timeline. Which containers and shims were the
    run's is decided at the end from the engine's create events (the run's label)."""

    def __init__(self, every: float = 0.5):
        self.every = every
        self.containers0 = _container_usage()
        self.containers: dict[str, float] = {}
        self.shims0: dict[int, float] = {}
        self.shims: dict[int, tuple[str, float]] = {}  # pid -> (container id, CPU s)
        self.daemons0 = self._daemons()
        for pid, (cid, cpu) in self._shims().items():
            self.shims0[pid] = cpu
        self.machine0 = _machine()
        self.timeline: list[tuple[float, float]] = []  # (wall clock, machine busy CPU s)
        self.sampler_cpu = 0.0
        self._events = subprocess.Popen(
            ["docker", "events", "--filter", "type=container", "--filter", "event=create", "--format", "{{json .}}"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.created: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        time.sleep(0.3)  # the event stream is subscribed before the run starts

    @staticmethod
    def _daemons() -> dict[int, tuple[str, float]]:
        out = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                pid = int(entry.name)
                st = _stat(pid)
                if st and (st[0] in DAEMONS or (st[0].startswith("opensandbox") or st[0] == "python")
                           and any(SERVER in part for part in _cmdline(pid)[:3])):
                    out[pid] = (SERVER if st[0] not in DAEMONS else st[0], st[1])
        return out

    @staticmethod
    def _shims() -> dict[int, tuple[str, float]]:
        out = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                st = _stat(int(entry.name))
                if st and st[0].startswith(SHIM):
                    args = _cmdline(int(entry.name))
                    cid = args[args.index("-id") + 1] if "-id" in args[:-1] else ""
                    out[int(entry.name)] = (cid, st[1])
        return out

    def _read(self) -> None:
        assert self._events.stdout is not None
        for line in self._events.stdout:
            try:
                self.created.append(json.loads(line))
            except ValueError:
                pass

    def _sample(self) -> None:
        self.containers.update(_container_usage())
        for pid, (cid, cpu) in self._shims().items():  # an exiting shim's command line is empty
            self.shims[pid] = (cid or self.shims.get(pid, ("", 0.0))[0], cpu)
        self.timeline.append((time.time(), _machine()[0]))

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            t0 = time.thread_time()
            self._sample()
            self.sampler_cpu += time.thread_time() - t0

    def stop(self, run: str) -> dict[str, float]:
        """CPU seconds by part over the run; `run`: the run's name, a label on its sandboxes."""
        self._stop.set()
        self._thread.join()
        self._sample()
        busy1, idle1 = _machine()
        time.sleep(0.3)
        self._events.terminate()
        self._events.wait()
        self._reader.join(timeout=5)
        ours = {ev.get("id") for ev in self.created
                if run in ((ev.get("Actor") or {}).get("Attributes") or {}).values()}
        out = {"containers": 0.0, "shims, runc": 0.0, "dockerd": 0.0, "containerd": 0.0, SERVER: 0.0}
        for cid, cpu in self.containers.items():
            if cid in ours:
                out["containers"] += cpu - self.containers0.get(cid, 0.0)
        others = 0.0
        for pid, (cid, cpu) in self.shims.items():
            if cid in ours:
                out["shims, runc"] += cpu - self.shims0.get(pid, 0.0)
            else:
                others += cpu - self.shims0.get(pid, 0.0)
        for pid, (name, cpu) in self._daemons().items():
            out[name] += cpu - self.daemons0.get(pid, (name, 0.0))[1]
        self.others = {"other containers": sum(cpu - self.containers0.get(cid, 0.0)
                                               for cid, cpu in self.containers.items() if cid not in ours),
                       "other shims": others}
        self.machine = (busy1 - self.machine0[0], idle1 - self.machine0[1])
        self.n_containers = len(ours)
        return out


def self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def run_once(a, wd: Path, model_url: str | None = None, tasks_file: Path | None = None,
             code_dir: Path = REPO) -> dict:
    """One run of the workflow of `code_dir` (this checkout, or another tree of the project:
    its Snakefile, profile and package, ahead of the installed one on PYTHONPATH)."""
    run = f"util-{a.provider}-{uuid.uuid4().hex[:6]}"  # its sandboxes' labels are this run's alone
    cfg = wd / "utilisation.json"
    cfg.write_text(json.dumps(config_for(a, run, model_url, tasks_file)))  # JSON is YAML
    # the repository's profile, as a run from the checkout gets it; --cores only counts jobs
    # here (sandboxes are capped by `concurrency`), so it must not be what limits them
    cmd = [sys.executable, "-m", "snakemake", "-s", str(code_dir / "Snakefile"), "-d", str(wd),
           "--workflow-profile", str(code_dir / "profiles" / "default"), "--cores", str(2 * a.c),
           "--configfile", str(cfg)]
    env = {**os.environ, KEY_ENV: OPENSANDBOX_KEY}
    if code_dir != REPO:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(code_dir / "src"), env.get("PYTHONPATH")]))
    host = Host(a.host_sample) if a.provider != "local" else None
    cpu0, own0, t0, w0 = children_cpu(), self_cpu(), time.monotonic(), time.time()
    with open(wd / "snakemake.log", "w+") as log:
        proc = subprocess.Popen(cmd, cwd=wd, stdout=log, stderr=subprocess.STDOUT, env=env)
        peaks = Peaks(proc.pid, a.sample)
        code = proc.wait()
        peaks.stop()
        wall, cpu, w1 = time.monotonic() - t0, children_cpu() - cpu0, time.time()
        parts = host.stop(run) if host else None
        own = self_cpu() - own0 - (host.sampler_cpu if host else 0.0)
        if code != 0:
            log.seek(0)
            print(log.read()[-4000:], file=sys.stderr)
            raise SystemExit(f"the run failed (exit {code}); its directory: {wd}")
    return {"wall": wall, "cpu": cpu, "run_dir": wd / "results" / run, "peaks": peaks, "host": host,
            "parts": parts, "own": own, "window": (w0, w1)}


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
    ratio = (lambda x: f"; ratio {x / ideal:.3f}") if ideal else (lambda x: "")
    print(f"  wall {wall:.1f} s; ideal ceil(N/C) x T = {ideal:.0f} s{ratio(wall)}")
    print(f"  first step start -> last grade end {end - start:.1f} s{ratio(end - start)} "
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
              f"such rollouts at once by memory (90 %); "
              + (f"CPU: {cores / (cpu / n) * t:.0f} rollouts of T={t:g} s at once keep its cores busy; " if t else "")
              + f"descriptors (the processes' sum; each process has its own limit, "
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


def span_totals(run_dir: Path) -> dict[str, list]:
    """Per span name over every rollout's trace: [count, total seconds]."""
    from sandbatch.trace import read_spans

    out: dict[str, list] = {}
    for path in run_dir.glob("*/*/trace.jsonl"):
        for sp in read_spans(path):
            if not sp.get("endTimeUnixNano"):
                continue
            row = out.setdefault(sp["name"], [0, 0.0])
            row[0] += 1
            row[1] += (int(sp["endTimeUnixNano"]) - int(sp["startTimeUnixNano"])) / 1e9
    return out


def report_host(a, res: dict, rows: list[dict]) -> dict:
    """The CPU of every part against the wall, what the cores did meanwhile, and where the
    rollouts waited (records and spans)."""
    cores = os.cpu_count() or 1
    wall, host = res["wall"], res["host"]
    parts = {"process tree": res["cpu"], "scripted model (benchmark process)": res["own"], **res["parts"]}
    total = sum(parts.values())
    floor = total / cores
    print(f"  CPU by part (s): " + "; ".join(f"{k} {v:.1f}" for k, v in parts.items())
          + f"; total {total:.1f} ({host.n_containers} containers of the run)")
    print(f"  CPU floor {floor:.1f} s (total / {cores} cores); wall {wall:.1f} s = {wall / floor:.2f} x the floor; "
          f"idle {wall * cores - total:.1f} CPU-s of {wall * cores:.0f} ({(wall * cores - total) / (wall * cores):.0%})")
    busy, idle = host.machine
    other = busy - total - host.sampler_cpu
    print(f"  the machine meanwhile (/proc/stat): busy {busy:.1f} CPU-s, idle {idle:.1f}; not this run's "
          f"{other:.1f} CPU-s (others' processes; other containers {host.others['other containers']:.1f}, "
          f"their shims {host.others['other shims']:.1f}; samplers {host.sampler_cpu:.1f}): the noise")
    # when the cores were idle, and which steps were running then
    w0, w1 = res["window"]
    step = max(2.0, math.ceil(wall / 24))
    print(f"  timeline ({step:g} s buckets from the command's start): machine busy cores | rollouts in "
          f"sandbox/harness/patch/grade step, between steps")
    samples = host.timeline
    spans = [[(s, _ts(r[s]["started_at"]), _ts(r[s]["finished_at"])) for s in STEPS] for r in rows]
    t = w0
    while t < w1:
        e = min(t + step, w1)
        inside = [(tt, b) for tt, b in samples if t <= tt <= e]
        before = [(tt, b) for tt, b in samples if tt < t]
        pts = (before[-1:] + inside)
        rate = (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]) if len(pts) > 1 and pts[-1][0] > pts[0][0] else 0.0
        mid = (t + e) / 2
        counts = [sum(1 for r in spans for s, s0, s1 in r if s == name and s0 <= mid < s1) for name in STEPS]
        between = sum(1 for r in spans if r[0][1] <= mid < r[-1][2]) - sum(counts)
        print(f"    {t - w0:6.0f}-{e - w0:<6.0f} {rate:4.2f} {'#' * round(rate * 10):20s} | "
              + "/".join(str(x) for x in counts) + f", {between}")
        t = e
    # where the rollouts waited: the phases of the records and the spans of the traces, largest first
    first = min(_ts(r["sandbox"]["started_at"]) for r in rows)
    last = max(_ts(r["grade"]["finished_at"]) for r in rows)
    waits = {f"record: {label}": sum(read(r) for r in rows) for label, read in PHASES}
    waits["record: agent (mini, its commands and model calls)"] = sum(float(r["harness"].get("agent_s") or 0) for r in rows)
    waits["record: tests"] = sum(_ph(r["grade"], "tests") for r in rows)
    calls = [json.loads(line) for path in res["run_dir"].glob("*/*/model_calls.jsonl")
             for line in path.read_text().splitlines() if line.strip()]
    if calls:
        waits[f"model calls ({len(calls)}, as the proxy timed them)"] = sum(float(c.get("latency_s") or 0) for c in calls)
    waits["run: start -> first step, x N"] = (first - w0) * len(rows)
    waits["run: last grade -> end, x N"] = (w1 - last) * len(rows)
    print(f"  where the rollouts' time went (seconds summed over the {len(rows)} rollouts; per rollout), largest first:")
    for k, v in sorted(waits.items(), key=lambda kv: -kv[1])[:14]:
        print(f"    {k:52s} {v:7.1f} {v / len(rows):6.2f}")
    if a.traces:
        spans_by = span_totals(res["run_dir"])
        print("  spans (count, seconds summed over the rollouts, mean), largest first; nested spans overlap:")
        for name, (count, secs) in sorted(spans_by.items(), key=lambda kv: -kv[1][1])[:16]:
            print(f"    {name:52s} {count:4d} {secs:7.1f} {secs / count:6.3f}")
    return {"wall": wall, "total": total, "floor": floor, "idle": wall * cores - total, "ratio": wall / floor}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--provider", choices=sorted(DEFAULTS), default="local")
    p.add_argument("-n", type=int, help="rollouts (default: local 256, docker and opensandbox 24)")
    p.add_argument("-c", type=int, help="concurrency (default: local 64, docker and opensandbox 8)")
    p.add_argument("-t", type=float, help="seconds the agent holds its sandbox (default 20; with --row 0: "
                   "the looks do not sleep, the agent is as fast as its commands and model calls)")
    p.add_argument("--harness", choices=("oracle", "mini-swe-agent"), default="oracle",
                   help="mini-swe-agent: host mode against the scripted model")
    p.add_argument("--row", help="a corpus row (corpus/<ID>, its image built: python -m sandbatch.corpus build ID): "
                   "N repeats of it, graded as SWE-bench, instead of the smoke tasks")
    p.add_argument("--turns", type=int, default=4, help="mini-swe-agent: model turns per rollout (default 4)")
    p.add_argument("--traces", action=argparse.BooleanOptionalAction, default=None,
                   help="record the rollouts' traces (file exporter) and read the sandbox operations' spans "
                   "from them (default: on with --row)")
    p.add_argument("--sample", type=float, default=2.0, help="seconds between samples of the process tree")
    p.add_argument("--host-sample", type=float, default=0.5,
                   help="seconds between samples of the containers, shims and the machine (docker, opensandbox)")
    p.add_argument("--before", type=Path, help="another tree of this project (e.g. `git archive REV | tar -x -C DIR`): "
                   "its runs alternate with this checkout's, labelled `before`")
    p.add_argument("--runs", type=int, default=1, help="run this many times, each in a fresh directory")
    p.add_argument("--keep", type=Path, help="run in DIR/<i> and keep it")
    a = p.parse_args()
    a.n = a.n or DEFAULTS[a.provider][0]
    a.c = a.c or DEFAULTS[a.provider][1]
    a.t = a.t if a.t is not None else (0.0 if a.row else 20.0)
    a.traces = bool(a.row) if a.traces is None else a.traces
    rows, tasks_file = None, None
    if a.row:
        from sandbatch import corpus

        task = corpus.rows([a.row])[0].task()
        rows = [task]
        tmp = Path(tempfile.mkdtemp(prefix="sandbatch-util-tasks-"))
        tasks_file = tmp / "tasks.jsonl"
        tasks_file.write_text(json.dumps(task) + "\n")
        if subprocess.run(["docker", "image", "inspect", task["image"]], capture_output=True).returncode:
            raise SystemExit(f"{task['image']} is not built; run: python -m sandbatch.corpus build {a.row}")
    trees = ([(a.before.resolve(), "before")] if a.before else []) + [(REPO, "now")]
    results: dict[str, list[dict]] = {who: [] for _, who in trees}
    for i in range(a.runs):
        for code_dir, who in trees:
            name = f"{who}-{i}" if a.before else str(i)
            wd = (a.keep / name) if a.keep else Path(tempfile.mkdtemp(prefix="sandbatch-util-"))
            wd.mkdir(parents=True, exist_ok=True)
            if a.before:
                print(f"== {who} ({code_dir}), run {i + 1}")
            print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
            if a.harness == "mini-swe-agent":  # the looks sleep: the agent lasts about T
                with serve(a.turns, a.t / max(1, a.turns - 2), rows) as url:
                    res = run_once(a, wd, url, tasks_file, code_dir)
            else:
                res = run_once(a, wd, None, tasks_file, code_dir)
            print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            rollouts = load_rollouts(res["run_dir"])
            report(a, res["wall"], res["cpu"], rollouts, res["peaks"])
            if res["host"] is not None:
                results[who].append(report_host(a, res, rollouts))
            if not a.keep:
                shutil.rmtree(wd, ignore_errors=True)
            sys.stdout.flush()
    if a.before and all(results.values()):
        print("before / now (medians over the runs):")
        for key in ("wall", "total", "floor", "idle", "ratio"):
            b, n = (statistics.median(r[key] for r in results[w]) for w in ("before", "now"))
            print(f"  {key:6s} {b:8.1f} {n:8.1f}" if key != "ratio" else f"  {key:6s} {b:8.2f} {n:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
