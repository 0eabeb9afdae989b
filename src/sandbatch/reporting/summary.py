"""The few lines a run ends with, from its aggregate's metrics.json: printed by the workflow's
end (a `snakemake` run) and by `sandbatch run`, so both say the same."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..contracts.metrics import Metrics


def _pct(value: Any) -> str:
    return f"{100 * value:.1f}%" if isinstance(value, (int, float)) else "n/a"


def summary_lines(run_dir: str | os.PathLike, run: str | None = None) -> list[str]:
    """What the run's aggregate found: rollouts, resolved, infrastructure errors by class,
    pass@k, and where the report is. Empty when the aggregate has not written its metrics."""
    run_dir = Path(run_dir)
    try:
        m = Metrics.model_validate_json((run_dir / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):  # a pydantic ValidationError is a ValueError
        return []
    name = run or run_dir.name
    n, resolved, infra = m.rollouts, m.resolved, m.infra_error_rate.numerator
    graded = n - infra
    lines = [f"sandbatch: run {name}: {n} rollouts of {m.tasks} tasks: {resolved} resolved "
             f"({_pct(m.resolved_rate_excluding_infra_errors.value)} of {graded} graded), "
             f"{graded - resolved} unresolved, {infra} infrastructure errors"]
    classes = m.infra_error_classes
    if infra:
        lines.append("sandbatch: infrastructure errors by class: "
                     + (", ".join(f"{c} {k}" for c, k in sorted(classes.items(), key=lambda kv: -kv[1])) or "n/a")
                     + f"; `sandbatch rerun-errors {name}` drops them, and the same command redoes them")
    pass_k = m.pass_at_k
    if pass_k:
        lines.append("sandbatch: " + ", ".join(f"pass@{k} {v:.1f}%" if isinstance(v, (int, float)) else f"pass@{k} n/a"
                                               for k, v in sorted(pass_k.items(), key=lambda kv: int(kv[0]))))
    report = run_dir / "report.md"
    view = run_dir / "report" / "view" / "index.html"
    lines.append(f"sandbatch: report {report}" + (f", viewer {view}" if view.exists() else ""))
    return lines
