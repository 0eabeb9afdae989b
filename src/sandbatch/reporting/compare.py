"""Paired comparison of two runs on the same tasks: did a change really help?

Per task, a run contributes its repeats' outcomes. Resolved rate and pass@k of each run
come with 95 % percentile-bootstrap intervals over tasks; the difference B - A is
bootstrapped over the same resampled tasks (paired). McNemar's exact test compares the
tasks each run resolves (a task counts as resolved by a run when more than half of its
repeats are; with one repeat, when it is), and those tasks are listed as flips. Tasks
whose repeats disagree within a run are listed as flaky.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..contracts.metrics import Metrics
from ..contracts.row import RolloutRow, read_rows
from ..core.errors import UserError
from .metrics import ks_for, pass_at_k

BOOTSTRAP = 2000
LEVEL = 0.95


@dataclass
class Run:
    name: str
    threshold: float
    tasks: dict[str, list[tuple[bool, bool]]]  # instance_id -> (resolved, reward >= threshold) per repeat


def load_run(run_dir: str | Path) -> Run:
    """A finished run: its rollouts.jsonl and the reward threshold of its metrics.json."""
    d = Path(run_dir)
    rollouts, metrics = d / "rollouts.jsonl", d / "metrics.json"
    for f in (rollouts, metrics):
        if not f.is_file():
            raise UserError(f"{f}: not found; compare needs finished runs (their aggregate step writes it)")
    threshold = Metrics.model_validate_json(metrics.read_text(encoding="utf-8")).reward_threshold
    return Run(d.name, threshold, outcomes(read_rows(rollouts), threshold))


def outcomes(rows: Iterable[RolloutRow], threshold: float) -> dict[str, list[tuple[bool, bool]]]:
    tasks: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r.instance_id, r.repeat)):
        tasks[r.instance_id].append((r.resolved, (r.reward or 0) >= threshold))
    return dict(tasks)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: the discordant pairs b, c under Binomial(b + c, 1/2)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def bootstrap(columns: Mapping[str, list[float]], n: int = BOOTSTRAP, seed: int = 0) -> dict[str, list[float]]:
    """Percentile intervals of the mean of each column, all resampled with the same task indices."""
    import numpy as np

    m = len(next(iter(columns.values())))
    idx = np.random.default_rng(seed).integers(0, m, size=(n, m))
    alpha = (1 - LEVEL) / 2
    out = {}
    for k, col in columns.items():
        means = np.asarray(col, dtype=float)[idx].mean(axis=1)
        lo, hi = np.quantile(means, [alpha, 1 - alpha])
        out[k] = [round(float(lo), 6), round(float(hi), 6)]
    return out


def compare(a: Run, b: Run, n_boot: int = BOOTSTRAP, seed: int = 0) -> dict[str, Any]:
    common = sorted(set(a.tasks) & set(b.tasks))
    if not common:
        raise UserError(f"runs {a.name} and {b.name} share no task; compare runs of the same benchmark")
    n_min = min(len(run.tasks[t]) for run in (a, b) for t in common)
    cols: dict[str, list[float]] = {}
    for tag, run in (("a", a), ("b", b)):
        cols[f"{tag}:resolved"] = [sum(r for r, _ in run.tasks[t]) / len(run.tasks[t]) for t in common]
        for k in ks_for(n_min):
            cols[f"{tag}:pass@{k}"] = [pass_at_k(len(run.tasks[t]), sum(c for _, c in run.tasks[t]), k) for t in common]
    metrics = ["resolved"] + [f"pass@{k}" for k in ks_for(n_min)]
    for name in metrics:
        cols[f"diff:{name}"] = [y - x for x, y in zip(cols[f"a:{name}"], cols[f"b:{name}"])]
    ci = bootstrap(cols, n_boot, seed)
    mean = lambda k: round(sum(cols[k]) / len(common), 6)  # noqa: E731
    table = {name: {"a": mean(f"a:{name}"), "a_ci": ci[f"a:{name}"], "b": mean(f"b:{name}"),
                    "b_ci": ci[f"b:{name}"], "diff": mean(f"diff:{name}"), "diff_ci": ci[f"diff:{name}"]}
             for name in metrics}
    solved = {tag: {t: 2 * sum(r for r, _ in run.tasks[t]) > len(run.tasks[t]) for t in common}
              for tag, run in (("a", a), ("b", b))}
    only_a = [t for t in common if solved["a"][t] and not solved["b"][t]]
    only_b = [t for t in common if solved["b"][t] and not solved["a"][t]]
    flaky = {tag: [t for t in common if 0 < sum(r for r, _ in run.tasks[t]) < len(run.tasks[t])]
             for tag, run in (("a", a), ("b", b))}
    return {
        "a": a.name, "b": b.name, "tasks": len(common), "repeats_min": n_min,
        "only_in_a": sorted(set(a.tasks) - set(b.tasks)), "only_in_b": sorted(set(b.tasks) - set(a.tasks)),
        "bootstrap": {"resamples": n_boot, "seed": seed, "level": LEVEL, "method": "percentile, tasks resampled"},
        "metrics": table,
        "mcnemar": {"resolved_a_only": len(only_a), "resolved_b_only": len(only_b),
                    "resolved_both": sum(1 for t in common if solved["a"][t] and solved["b"][t]),
                    "resolved_neither": sum(1 for t in common if not solved["a"][t] and not solved["b"][t]),
                    "p_value": round(mcnemar_exact(len(only_a), len(only_b)), 6)},
        "flips": {"a_to_b_lost": only_a, "a_to_b_gained": only_b},
        "flaky": {"a": flaky["a"], "b": flaky["b"]},
    }



def _row(name: str, m: Mapping[str, Any]) -> tuple[str, str, str, str]:
    iv = lambda v, lo_hi: f"{100 * v:.1f}% [{100 * lo_hi[0]:.1f}, {100 * lo_hi[1]:.1f}]"  # noqa: E731
    d = f"{100 * m['diff']:+.1f} pp [{100 * m['diff_ci'][0]:+.1f}, {100 * m['diff_ci'][1]:+.1f}]"
    return name, iv(m["a"], m["a_ci"]), iv(m["b"], m["b_ci"]), d


def render(c: Mapping[str, Any], limit: int = 20) -> str:
    rows = [("metric", f"A: {c['a']}", f"B: {c['b']}", "B - A")] + [_row(n, m) for n, m in c["metrics"].items()]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    mc = c["mcnemar"]
    listing = lambda ts: ", ".join(ts[:limit]) + (f" ... ({len(ts) - limit} more)" if len(ts) > limit else "")  # noqa: E731
    lines = [f"{c['tasks']} tasks in both runs, >= {c['repeats_min']} repeat(s) each; 95% intervals: bootstrap "
             f"over tasks ({c['bootstrap']['resamples']} resamples)"]
    if c["only_in_a"] or c["only_in_b"]:
        lines.append(f"left out: {len(c['only_in_a'])} task(s) only in A, {len(c['only_in_b'])} only in B")
    lines += ["", *["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows], "",
              f"McNemar exact (resolved: by more than half the repeats): A only {mc['resolved_a_only']}, "
              f"B only {mc['resolved_b_only']}, both {mc['resolved_both']}, neither {mc['resolved_neither']}; "
              f"p = {mc['p_value']:.4g}",
              f"lost by B ({len(c['flips']['a_to_b_lost'])}): {listing(c['flips']['a_to_b_lost']) or '-'}",
              f"gained by B ({len(c['flips']['a_to_b_gained'])}): {listing(c['flips']['a_to_b_gained']) or '-'}",
              f"flaky in A ({len(c['flaky']['a'])}): {listing(c['flaky']['a']) or '-'}",
              f"flaky in B ({len(c['flaky']['b'])}): {listing(c['flaky']['b']) or '-'}"]
    return "\n".join(lines) + "\n"


def html(c: Mapping[str, Any]) -> str:
    """The comparison as a small self-contained page (a result of the Snakemake report)."""
    from html import escape

    rows = "".join("<tr>" + "".join(f"<td>{escape(x)}</td>" for x in _row(n, m)) + "</tr>"
                   for n, m in c["metrics"].items())
    items = lambda ts: "".join(f"<li>{escape(t)}</li>" for t in ts) or "<li>none</li>"  # noqa: E731
    mc = c["mcnemar"]
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{escape(c['b'])} vs {escape(c['a'])}</title>
<style>body{{font-family:sans-serif;margin:1em}} table{{border-collapse:collapse;margin:.5em 0}}
td,th{{border:1px solid #ccc;padding:.25em .6em;text-align:left}} th{{background:#f3f3f3}}</style></head>
<body><h1>Run {escape(c['b'])} (B) against {escape(c['a'])} (A)</h1>
<p>{c['tasks']} tasks in both runs, at least {c['repeats_min']} repeat(s) each. 95% intervals: percentile
bootstrap over tasks ({c['bootstrap']['resamples']} resamples, paired for the difference).</p>
<table id="compare"><tr><th>metric</th><th>A: {escape(c['a'])}</th><th>B: {escape(c['b'])}</th><th>B - A</th></tr>{rows}</table>
<p>McNemar exact test on the tasks each run resolves (by more than half its repeats): A only {mc['resolved_a_only']},
B only {mc['resolved_b_only']}, both {mc['resolved_both']}, neither {mc['resolved_neither']}; p = {mc['p_value']:.4g}.</p>
<h2>Lost by B</h2><ul>{items(c['flips']['a_to_b_lost'])}</ul>
<h2>Gained by B</h2><ul>{items(c['flips']['a_to_b_gained'])}</ul>
<h2>Flaky (repeats disagree)</h2><p>A:</p><ul>{items(c['flaky']['a'])}</ul><p>B:</p><ul>{items(c['flaky']['b'])}</ul>
</body></html>
"""
