"""`sandbatch rerun-errors`: make the next run redo only the rollouts that ended in infra_error.

It deletes each such rollout's records from the phase that failed onward; the same
`snakemake` command then redoes exactly those steps (missing outputs) and the aggregate.
What is redone per failed phase:

- sandbox: everything;
- harness: the agent run and what follows (sandbox.json stays: a dead sandbox is recreated);
- patch: also the agent run, because the agent's sandbox is gone by then (the aggregate
  reaps every sandbox of a finished run);
- grade: grading only, from the saved patch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import UserError
from ..contracts.records import (EVENTS, GRADE, HARNESS, MODEL_CALLS, PATCH, PATCH_INFO, RESPONSE, SANDBOX, TRAJECTORY,
                               HarnessRecord, PatchRecord, SandboxRecord, agent_handle, load, read_index, summary)

# phase -> the files that phase writes
WRITES: dict[str, tuple[str, ...]] = {
    "sandbox": (SANDBOX,),
    "harness": (EVENTS, HARNESS, MODEL_CALLS, RESPONSE, TRAJECTORY),
    "patch": (PATCH, PATCH_INFO),
    "grade": (GRADE, "grade.log"),
}
PHASES = tuple(WRITES)
# the phase a rerun starts from when this phase failed
RESTART = {"sandbox": "sandbox", "harness": "harness", "patch": "harness", "grade": "grade"}


def _delete_from(d: Path, start: str, dry_run: bool = False) -> list[str]:
    """Delete rollout `d`'s records of phase `start` and every later phase; the names deleted."""
    deleted = []
    for p in PHASES[PHASES.index(start):]:
        for name in WRITES[p]:
            path = d / name
            if path.exists():
                deleted.append(name)
                if not dry_run:
                    path.unlink()
    return deleted


def forget_lost_agent_runs(run_dir: str | os.PathLike, deleted_ids: list[str]) -> list[str]:
    """Rollouts (`<task>/<repeat>`) whose agent run was lost with a sandbox just deleted.

    An agent run's work lives in its sandbox until the patch step takes the diff (or, for a
    task graded in the agent's sandbox, until the grade). When the run's end reaps that
    sandbox (an interrupted or failed run, `sandbatch stop`, `sandbatch reap`), the harness
    record alone is worth nothing: the next run would find the sandbox gone and end the
    rollout in an infrastructure error for work that was merely interrupted. Its records go
    instead, from the agent run on, and the next run redoes it (sandbox.json stays: the
    harness step replaces a dead sandbox).
    """
    gone = set(deleted_ids)
    if not gone:
        return []
    lost = []
    for harness_file in sorted(Path(run_dir).glob(f"*/*/{HARNESS}")):
        d = harness_file.parent
        if (d / GRADE).exists():
            continue
        try:
            handle = agent_handle(load(SandboxRecord, d / SANDBOX), load(HarnessRecord, harness_file))
            held = not (d / PATCH_INFO).exists() or load(PatchRecord, d / PATCH_INFO).kept_sandbox is not None
        except (OSError, ValueError):
            continue  # a record being written: not a finished agent run
        if held and handle.sandbox_id in gone:
            _delete_from(d, "harness")
            lost.append(f"{d.parent.name}/{d.name}")
    return lost


def reap_and_forget(cfg, workdir: str | os.PathLike | None = None) -> tuple[list[str], list[str]]:
    """Delete the run instance's sandboxes (sandbatch.sandbox.reaper.reap_run), then forget the
    agent runs lost with them (forget_lost_agent_runs): (sandbox ids deleted, rollouts to redo)."""
    from ..sandbox.reaper import reap_run

    deleted = reap_run(cfg, workdir)
    return deleted, forget_lost_agent_runs(Path(workdir or ".") / cfg.run_dir, deleted)


def lost_note(lost: list[str]) -> str:
    return (f"sandbatch: {len(lost)} agent run(s) lost with their sandbox before the patch was taken "
            f"will be redone by the next run: {', '.join(lost[:5])}{' ...' if len(lost) > 5 else ''}")


@dataclass
class Rerun:
    rollout: str  # <task>/<repeat>
    failed_phase: str
    failure_class: str | None
    restart: str
    deleted: list[str] = field(default_factory=list)


def failed_phase(d: Path) -> tuple[str, str | None] | None:
    """(first phase whose record says infra_error, its failure class), or None."""
    index = read_index(d)
    for phase, name in (("sandbox", SANDBOX), ("harness", HARNESS), ("patch", PATCH_INFO), ("grade", GRADE)):
        path = d / name
        if not path.is_file():
            return None  # not finished: the next run does it anyway
        head = summary(d, name, index)
        if head.status == "infra_error":
            return phase, head.failure_class
    return None


def rerun_errors(run: str, results_dir: str = "results", workdir: str | os.PathLike = ".",
                 classes: list[str] | None = None, dry_run: bool = False) -> list[Rerun]:
    from .owners import owners

    wd = Path(workdir).resolve()
    run_dir = wd / results_dir / run
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such run directory; check the run name and --results-dir")
    live = [o for o in owners(wd, prune=False) if o.run in (run, None)]
    if live and not dry_run:
        raise UserError(f"a Snakemake (pid {live[0].pid}) is working in {wd}; "
                        f"wait for it or run `sandbatch stop {run}` first")
    out: list[Rerun] = []
    for grade in sorted(run_dir.glob(f"*/*/{GRADE}")):
        d = grade.parent
        found = failed_phase(d)
        if found is None or (classes and found[1] not in classes):
            continue
        phase, cls = found
        start = RESTART[phase]
        out.append(Rerun(f"{d.parent.name}/{d.name}", phase, cls, start, _delete_from(d, start, dry_run)))
    return out
