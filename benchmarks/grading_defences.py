"""Grading time the tampering defences add per rollout, on the bundled smoke tasks.

    python benchmarks/grading_defences.py [--repeats 5] [--keep DIR]
    python benchmarks/grading_defences.py --suite DIR [--python PY] [--repeats 3] [-- PYTEST_ARGS...]
    python benchmarks/grading_defences.py --corpus ROW [ROW ...] [--repeats 3]

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

With --suite: a real test suite checked out in DIR, run by the real pytest with and without
the verdict channel's plugin loaded as the grader loads it (its keys, conf.json with DIR as
the workdir, the assertion-pass hook), alternating; prints the CPU time of the test command
(the pytest process) per mode and the share the channel and its checks add, and checks that
every run's verdict is intact and reports nothing (no test replaced, no vacuous assertion).
--python: the interpreter that runs the suite (a venv with the suite's package installed from
DIR, so that its code is the code under test the checks see); the benchmark's own by default.

With --corpus: rows of the real-row corpus (corpus/README.md; their images built first,
`python -m sandbatch.corpus build ROW`), each gold patch graded by the real grade step on
Docker with every defence on and with log_only, alternating; prints the `tests` phase per row
and mode (in log_only it is the test run itself: the patch applied, the eval script, the log
parsed), and the CPU time of each grade (its sandbox's container, read from the engine's stats
before the delete, and this process), with the share the defences add to each, and the load
average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import statistics
import sys
import tempfile
from pathlib import Path

from sandbatch import REPO_ROOT
from sandbatch.core import config
from sandbatch.contracts.records import GRADE, PATCH, PATCH_INFO, GradeRecord, PatchRecord, load
from sandbatch.steps.common import StepContext, run_step
from sandbatch.steps.grade import GradeStep

SMOKE = REPO_ROOT / "data" / "smoke" / "tasks.jsonl"
TARGET = 0.05


def settings(work: Path, mode: str, kind: str = "smoke", tasks: Path = SMOKE, provider: str = "local") -> Path:
    sandbox = {"provider": provider, **({"local": {"root": str(work / "sb")}} if provider == "local" else {})}
    cfg = config.load([], {"run": f"bench-{mode}", "results_dir": str(work / "results"), "retries": 0,
                           "benchmark": {"kind": kind, "tasks": str(tasks)}, "grading": {"tampering": mode},
                           "sandbox": sandbox},
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


def suite(directory: Path, pytest_args: list[str], repeats: int, python: str = sys.executable) -> int:
    import os
    import subprocess

    from sandbatch.grading import verdict

    def run(on: bool) -> tuple[float, verdict.Verdict | None]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
        channel = None
        if on:
            channel = verdict.Channel.new(tempfile.mkdtemp(prefix="suite-channel-"))
            Path(channel.dir).mkdir(parents=True)
            for name, data in channel.files(str(directory)).items():
                Path(channel.dir, name).write_bytes(data)
            for n, key in enumerate(channel.keys):
                Path(channel.dir, f"key.{n}").write_bytes(key)
            env.update(PYTHONPATH=channel.dir, PYTEST_ADDOPTS=channel.addopts())
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args], cwd=directory,
                       env=env, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        took = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        if channel is None:
            return took, None
        files = {n: Path(channel.dir, f"verdict.{n}.jsonl").read_bytes() for n in range(verdict.KEYS)
                 if Path(channel.dir, f"verdict.{n}.jsonl").exists()}
        unclaimed = {n for n in range(verdict.KEYS) if Path(channel.dir, f"key.{n}").exists()}
        return took, verdict.merge(files, channel.keys, unclaimed)

    times: dict[bool, list[float]] = {True: [], False: []}
    bad = []
    run(True)  # warm-up: the first run compiles the suite's bytecode
    for i in range(repeats):
        for on in (True, False) if i % 2 == 0 else (False, True):
            took, v = run(on)
            times[on].append(took)
            if v is not None and (v.state != "ok" or v.findings or v.asserts or v.changed):
                bad.append((v.state, v.findings[:3], v.asserts, v.changed))
            if v is not None and i == 0:
                print(f"verdict: {v.state}, {len(v.outcomes)} tests, findings {len(v.findings)}")
    off, on = statistics.median(times[False]), statistics.median(times[True])
    print(f"test command CPU, median of {repeats}: without the channel {off:.2f} s, with it {on:.2f} s: "
          f"{(on - off) / off:+.1%} (target < {TARGET:.0%}); load average {loadavg()}")
    return failed(bad, "runs with a verdict that is not clean")


def corpus(ids: list[str], repeats: int) -> int:
    """The real rows' gold patches, graded on Docker with the defences on and off, alternating."""
    import os
    import subprocess

    from sandbatch.corpus import rows

    selected = rows(ids)
    missing = [r.image() for r in selected
               if subprocess.run(["docker", "image", "inspect", r.image()], capture_output=True).returncode]
    if missing:
        print(f"images missing: {', '.join(missing)}; build them with python -m sandbatch.corpus build ROW",
              file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="grading-defences-corpus-"))
    tasks = work / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r.task()) + "\n" for r in selected), encoding="utf-8")
    modes = ("neutralise", "log_only")
    cfgs = {m: settings(work, m, "swebench", tasks, "docker") for m in modes}
    wall = {r.id: {m: [] for m in modes} for r in selected}
    used = {r.id: {m: [] for m in modes} for r in selected}
    bad = []
    print(f"load average before: {loadavg()}")
    with container_cpu() as sandboxes:
        for r in selected:  # warm-up, not counted: the first grade of an image reads it from disk
            grade_once(cfgs["log_only"], r.id, r.data["patch"], repeats)
        # and the first grade with the defences imports their modules (about 1.2 s of this process's CPU,
        # which a median of few repeats would count as the defences' own)
        grade_once(cfgs["neutralise"], selected[0].id, selected[0].data["patch"], repeats)
        for i in range(repeats):
            for r in selected:
                for mode in modes if i % 2 == 0 else modes[::-1]:
                    sandboxes.clear()
                    rec, own = grade_once(cfgs[mode], r.id, r.data["patch"], i)
                    if not rec.resolved or rec.tampering:
                        bad.append((r.id, mode, rec.status, rec.failure_class, rec.tampering))
                    wall[r.id][mode].append(rec.phases["tests"])
                    used[r.id][mode].append(own + sum(sandboxes))
    for what, figures in (("`tests` phase wall-clock", wall),
                          ("CPU of the grade (its sandbox's container and this process)", used)):
        print(f"gold grades on Docker, {what}, median of {repeats} (seconds)")
        print(f"{'row':32} {'off':>7} {'on':>7} {'added':>8}")
        total = dict.fromkeys(modes, 0.0)
        for rid, by_mode in figures.items():
            on, off = statistics.median(by_mode["neutralise"]), statistics.median(by_mode["log_only"])
            total["neutralise"], total["log_only"] = total["neutralise"] + on, total["log_only"] + off
            print(f"{rid:32} {off:7.2f} {on:7.2f} {(on - off) / off:+8.1%}   runs: on "
                  f"{[round(x, 1) for x in by_mode['neutralise']]}, off {[round(x, 1) for x in by_mode['log_only']]}")
        share = (total["neutralise"] - total["log_only"]) / total["log_only"]
        print(f"all rows: {total['log_only']:.2f} s without the defences, {total['neutralise']:.2f} s with them: "
              f"{share:+.1%} (target < {TARGET:.0%})")
    print(f"load average after: {loadavg()}; {os.cpu_count()} cores")
    return failed(bad, "gold grades did not resolve cleanly")


@contextlib.contextmanager
def container_cpu():
    """The CPU seconds of each Docker sandbox deleted meanwhile, read from the engine's stats just
    before the delete: CPU time is what a loaded machine does not change, wall-clock is not."""
    from sandbatch.sandbox.docker.provider import DockerProvider

    seen: list[float] = []
    delete = DockerProvider.delete

    async def counted(self: DockerProvider, sandbox_id: str) -> bool:
        try:
            stats = await self.engine.call("stats", sandbox_id, stream=False, one_shot=True)
            seen.append(stats["cpu_stats"]["cpu_usage"]["total_usage"] / 1e9)
        except Exception as exc:  # noqa: BLE001 - a figure lost, said so; the delete goes on
            print(f"no CPU figure for sandbox {sandbox_id}: {exc}", file=sys.stderr)
        return await delete(self, sandbox_id)

    DockerProvider.delete = counted
    try:
        yield seen
    finally:
        DockerProvider.delete = delete


def loadavg() -> str:
    import os

    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def failed(bad: list, what: str) -> int:
    if bad:
        print(f"{len(bad)} {what}: {bad[:3]}", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--keep", type=Path, help="grade under this directory and keep it (default: a temporary one)")
    ap.add_argument("--suite", type=Path, help="a test suite's checkout: time the channel on it (see above)")
    ap.add_argument("--python", default=sys.executable, help="with --suite: the interpreter that runs it")
    ap.add_argument("--corpus", nargs="+", metavar="ROW", help="grade these corpus rows' gold patches (see above)")
    ap.add_argument("pytest_args", nargs="*", help="with --suite: pytest's arguments (after --)")
    args = ap.parse_args()
    if args.corpus:
        return corpus(args.corpus, args.repeats)
    if args.suite:
        return suite(args.suite.resolve(), args.pytest_args, args.repeats, args.python)
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
    return failed(bad, "gold grades did not resolve cleanly")


if __name__ == "__main__":
    sys.exit(main())
