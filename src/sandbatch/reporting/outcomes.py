"""What became of each rollout and each task, in words a reader of the report and the viewer
takes in at a glance: one place for the labels, so report.md, the HTML report and the
viewer's index never disagree.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable, NamedTuple

from ..contracts.row import RolloutRow

# the steps whose durations add up to a rollout's time (install and agent are parts of harness)
STEPS = ("sandbox", "harness", "patch", "grade")
ERROR_CHARS = 200  # an infrastructure error's example message, cut to this


def rollout_seconds(row: RolloutRow) -> float | None:
    """A rollout's time: its steps' durations summed (None when no step recorded one)."""
    vals = [v for k in STEPS if (v := getattr(row.durations, k))]
    return round(sum(vals), 3) if vals else None


def outcome(row: RolloutRow) -> str:
    """"resolved"; else what stopped it: an infrastructure error, the agent's error or timeout,
    tampering, its class (empty_patch, patch_apply_failed, ...), or "tests failed" for a
    graded patch whose tests did not pass (its status is ok: the agent finished)."""
    if row.resolved:
        return "resolved"
    status, cls = row.status, row.failure_class
    if status != "ok":
        return f"{status}: {cls}" if cls else status
    if cls:
        return cls
    return "tests failed" if row.tests_ran else "unresolved"


def flagged(row: RolloutRow) -> bool:
    """The patch changed what grades it (tampering) or reaches into the test runner (suspicious)."""
    return bool(row.tampering or row.suspicious)


def category(row: RolloutRow) -> str:
    """resolved / unresolved / infra_error: the viewer's filter and the summary line count these."""
    if row.infra_error:
        return "infra_error"
    return "resolved" if row.resolved else "unresolved"


def summary_line(rows: list[RolloutRow]) -> str:
    """One sentence: how many rollouts resolved, unresolved, infra errors, flagged."""
    n = len(rows)
    counts = Counter(category(r) for r in rows)
    pct = f" ({100 * counts['resolved'] / n:.1f}%)" if n else ""
    return (f"{n} rollouts of {len({r.instance_id for r in rows})} tasks: {counts['resolved']} resolved{pct}, "
            f"{counts['unresolved']} unresolved, {counts['infra_error']} infra errors, "
            f"{sum(1 for r in rows if flagged(r))} flagged.")


class TaskOutcome(NamedTuple):
    task: str  # its instance id
    resolved: int  # of its repeats
    repeats: int
    outcome: str  # what became of the repeats not resolved, with counts ("resolved" when none)
    tokens: int
    time_s: float | None  # None: no step recorded a duration


class InfraErrorClass(NamedTuple):
    failure_class: str
    rollouts: int
    example: str  # the first rollout of the class, `instance_id#repeat`
    phase: str | None  # its failed step
    error: str  # the first line of its error, cut to ERROR_CHARS


def task_rows(rows: Iterable[RolloutRow]) -> list[TaskOutcome]:
    """One row per task, in the rollouts' order: its repeats resolved (k/n), what became of
    the others (outcome counts), its tokens and time, each summed over its repeats."""
    by_task: dict[str, list[RolloutRow]] = defaultdict(list)
    for r in rows:
        by_task[r.instance_id].append(r)
    out = []
    for task, rs in by_task.items():
        secs = [s for s in map(rollout_seconds, rs) if s is not None]
        others = Counter(outcome(r) for r in rs if not r.resolved)
        out.append(TaskOutcome(
            task=task, resolved=sum(1 for r in rs if r.resolved), repeats=len(rs),
            outcome=", ".join(f"{k} x{v}" if v > 1 else k for k, v in sorted(others.items())) or "resolved",
            tokens=sum(r.total_tokens for r in rs),
            time_s=round(sum(secs), 1) if secs else None,
        ))
    return out


def infra_errors(rows: Iterable[RolloutRow]) -> list[InfraErrorClass]:
    """The infrastructure errors by class, most frequent first: count and one example (the
    first rollout of the class, its failed step and the first line of its error)."""
    by_class: dict[str, list[RolloutRow]] = defaultdict(list)
    for r in rows:
        if r.infra_error:
            by_class[r.failure_class or "unclassified"].append(r)
    out = []
    for cls, rs in sorted(by_class.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        ex = rs[0]
        error = ((ex.error or "").strip().splitlines() or [""])[0]
        out.append(InfraErrorClass(failure_class=cls, rollouts=len(rs), example=ex.key, phase=ex.failed_phase,
                                   error=error[:ERROR_CHARS] + ("\u2026" if len(error) > ERROR_CHARS else "")))
    return out
