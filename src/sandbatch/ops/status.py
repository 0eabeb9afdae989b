"""`sandbatch status`: where a run stands, from the records on disk (cheap on 12,000 rollouts).

A step is done when its record exists and Snakemake has no incomplete marker for it; with
a marker it is running (a live Snakemake works here) or interrupted (none does: the next
run redoes it). Otherwise it is pending. A rollout is done when grade.json and
response.json are. The counted fields come from the rollout's record index
(sandbatch.contracts.records.INDEX, a few short lines), so a 100 KB grade.json with thousands of
test results is never parsed.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.util import duration_text
from ..contracts.records import (GRADE, HARNESS, PATCH_INFO, RESPONSE, SANDBOX, IndexLine, final_status, read_index,
                                 summary)

# step -> the record that marks it done (in chain order)
STEPS: dict[str, str] = {"sandbox": SANDBOX, "harness": HARNESS, "convert": RESPONSE, "patch": PATCH_INFO,
                         "grade": GRADE}
STATUSES = ("ok", "agent_error", "timeout", "infra_error")


def incomplete_outputs(workdir: Path) -> set[str]:
    """Absolute paths of the outputs Snakemake has marked incomplete (jobs started, not finished)."""
    from .owners import incomplete_markers

    return {os.path.normpath(os.path.join(workdir, key)) for _, key in incomplete_markers(workdir)}


@dataclass
class RunStatus:
    run: str
    run_dir: str
    tasks: int
    repeats: int
    rollouts: int
    done: int = 0
    resolved: int = 0
    steps: dict[str, Counter] = field(default_factory=dict)
    status_counts: Counter = field(default_factory=Counter)
    failure_classes: Counter = field(default_factory=Counter)
    mean_step_s: dict[str, float | None] = field(default_factory=dict)
    running_jobs: int = 0
    snakemake_pids: list[int] = field(default_factory=list)
    eta_s: float | None = None
    elapsed_s: float | None = None

    @property
    def live(self) -> bool:
        return bool(self.snakemake_pids)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run, "run_dir": self.run_dir, "tasks": self.tasks, "repeats": self.repeats,
            "rollouts": self.rollouts, "done": self.done, "resolved": self.resolved,
            "resolved_rate_of_done": round(self.resolved / self.done, 6) if self.done else None,
            "steps": {s: dict(c) for s, c in self.steps.items()},
            "status_counts": dict(self.status_counts), "failure_classes": dict(self.failure_classes),
            "snakemake": {"running": self.live, "pids": self.snakemake_pids, "running_jobs": self.running_jobs},
            "mean_step_s": self.mean_step_s, "eta_s": self.eta_s, "elapsed_s": self.elapsed_s,
        }


def collect(run: str, results_dir: str = "results", workdir: str | os.PathLike = ".") -> RunStatus:
    from ..core.config import run_config
    from .owners import owners
    from ..tasks import load_tasks

    wd = Path(workdir).resolve()
    run_dir = wd / results_dir / run
    cfg = run_config(run, results_dir, wd)
    with contextlib.chdir(wd):  # the config's paths are relative to the working directory
        tasks = load_tasks(cfg.benchmark)

    st = RunStatus(run=run, run_dir=str(run_dir), tasks=len(tasks), repeats=cfg.repeats,
                   rollouts=len(tasks) * cfg.repeats, steps={s: Counter() for s in STEPS})
    live = [o for o in owners(wd, prune=False) if o.local and o.run in (run, None)]
    st.snakemake_pids = sorted(o.pid for o in live)
    marked = incomplete_outputs(wd)
    prefix = str(run_dir) + os.sep
    marked = {m for m in marked if m.startswith(prefix)}
    st.running_jobs = len({os.path.dirname(m) for m in marked}) if live else 0
    durations: dict[str, list[float]] = {s: [] for s in STEPS}
    todo: Counter = Counter()  # step -> rollouts that still need it

    root = str(run_dir)  # plain strings: pathlib would cost more than the reads on 12,000 rollouts
    for task in tasks:
        for repeat in range(cfg.repeats):
            d = os.path.join(root, task.id, str(repeat))
            try:
                names = set(os.listdir(d))
            except FileNotFoundError:
                names = set()
            index = read_index(d) if names else {}
            recs: dict[str, IndexLine] = {}
            for step, name in STEPS.items():
                path = os.path.join(d, name)
                if name in names and path not in marked:
                    if name == RESPONSE:  # not a Record: no status / duration of its own
                        recs[step] = IndexLine()
                    else:
                        try:
                            recs[step] = summary(d, name, index)
                        except (OSError, ValueError):  # being replaced right now
                            st.steps[step]["unreadable"] += 1
                            todo[step] += 1
                            continue
                    st.steps[step][recs[step].status] += 1
                    dur = recs[step].duration_s
                    if dur is not None:
                        durations[step].append(dur)
                else:
                    state = "pending" if path not in marked else ("running" if live else "interrupted")
                    st.steps[step][state] += 1
                    todo[step] += 1
            if "grade" in recs and "convert" in recs:
                st.done += 1
                _account(st, recs)

    st.mean_step_s = {s: round(sum(v) / len(v), 3) if v else None for s, v in durations.items()}
    if live and st.done < st.rollouts:
        known = [v for v in st.mean_step_s.values() if v is not None]
        if known:
            fallback = sum(known) / len(known)
            work = sum(n * (st.mean_step_s[s] if st.mean_step_s[s] is not None else fallback)
                       for s, n in todo.items())
            st.eta_s = round(work / max(1, st.running_jobs), 1)
        started = [o.create_time for o in live if o.create_time]
        if started:
            st.elapsed_s = round(time.time() - min(started), 1)
    return st


def _account(st: RunStatus, recs: dict[str, IndexLine]) -> None:
    """Status and failure class of a finished rollout, as the aggregate computes them."""
    final = final_status(recs)
    st.status_counts[final.status] += 1
    if final.failure_class:
        st.failure_classes[final.failure_class] += 1
    if recs["grade"].resolved:
        st.resolved += 1


def _duration(seconds: float | None) -> str:
    return "n/a" if seconds is None else duration_text(seconds)


def render(st: RunStatus) -> str:
    cols = [*STATUSES, "running", "interrupted", "pending"]
    extra = sorted({k for c in st.steps.values() for k in c} - set(cols))
    cols += extra
    width = max(len(c) for c in cols) + 2
    if st.live:
        state = f"Snakemake running (pid {', '.join(map(str, st.snakemake_pids))}), {st.running_jobs} job(s) in flight"
    else:
        state = "no Snakemake running"
    lines = [f"run {st.run}: {st.tasks} tasks x {st.repeats} repeats = {st.rollouts} rollouts; {state}", "",
             "step".ljust(9) + "".join(c.rjust(width) for c in cols)]
    for step, counts in st.steps.items():
        lines.append(step.ljust(9) + "".join(str(counts.get(c, 0)).rjust(width) for c in cols))
    pct = f" ({100 * st.resolved / st.done:.1f}% of done)" if st.done else ""
    lines += ["", f"done {st.done}/{st.rollouts}, resolved {st.resolved}{pct}"]
    if st.status_counts:
        lines.append("status: " + ", ".join(f"{k} {v}" for k, v in sorted(st.status_counts.items())))
    if st.failure_classes:
        lines.append("failures: " + ", ".join(f"{k} {v}" for k, v in st.failure_classes.most_common()))
    interrupted = sum(c.get("interrupted", 0) for c in st.steps.values())
    if interrupted:
        lines.append(f"interrupted: {interrupted} step(s) of a stopped run; the next run redoes them")
    if st.live:
        lines.append(f"elapsed {_duration(st.elapsed_s)}, ETA {_duration(st.eta_s)} "
                     f"(mean step durations of finished records / jobs in flight)")
    return "\n".join(lines) + "\n"
