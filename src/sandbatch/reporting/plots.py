"""The run's plots as small self-contained SVG bar charts (for `snakemake --report`).

Written by hand rather than with matplotlib: four bar charts do not justify a 50 MB
dependency and half a second of import in the aggregate, and plain SVG text is
deterministic (same rows, same bytes) and can be checked by tests.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from html import escape
from typing import Sequence

from ..contracts.row import RolloutRow

from .metrics import PHASES, percentile

WIDTH, BAR_H, GAP, LABEL_W, PAD = 640, 18, 6, 190, 12
COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756")


def bar_chart(title: str, rows: Sequence[tuple[str, Sequence[float]]], unit: str = "",
              series: Sequence[str] = (), vmax: float | None = None, fmt: str = "{:g}") -> str:
    """Horizontal bars, one group per row (one bar per series), labelled with their values."""
    n_series = max((len(v) for _, v in rows), default=1) or 1
    top = 2 * PAD + 16 + (16 if series else 0)
    group_h = n_series * BAR_H + GAP
    height = top + max(1, len(rows)) * group_h + PAD
    peak = vmax if vmax is not None else max((x for _, v in rows for x in v), default=0.0)
    scale = (WIDTH - LABEL_W - 3 * PAD - 60) / peak if peak > 0 else 0.0
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
           f'<text x="{PAD}" y="{PAD + 12}" font-size="14" font-weight="bold">{escape(title)}</text>']
    for i, name in enumerate(series):
        x = PAD + i * 130
        out.append(f'<rect x="{x}" y="{PAD + 20}" width="10" height="10" fill="{COLORS[i % len(COLORS)]}"/>'
                   f'<text x="{x + 14}" y="{PAD + 29}">{escape(name)}</text>')
    if not rows:
        out.append(f'<text x="{PAD}" y="{top + 12}" fill="#666666">no data</text>')
    for r, (label, values) in enumerate(rows):
        y = top + r * group_h
        out.append(f'<text x="{LABEL_W}" y="{y + n_series * BAR_H / 2 + 4:.1f}" text-anchor="end">'
                   f'{escape(label[:32])}</text>')
        for j, v in enumerate(values):
            w = max(0.0, v * scale)
            yy = y + j * BAR_H
            out.append(f'<rect x="{LABEL_W + PAD}" y="{yy}" width="{w:.1f}" height="{BAR_H - 2}" '
                       f'fill="{COLORS[j % len(COLORS)]}"/>'
                       f'<text x="{LABEL_W + 2 * PAD + w:.1f}" y="{yy + BAR_H - 5}">{fmt.format(v)}{unit}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


TITLES = {"resolved_by_repo": "Resolved per repository (% of rollouts)", "durations": "Duration per phase (seconds)",
          "tokens": "Tokens per rollout", "failures": "Failures by class (rollouts)"}


def resolved_by_repo(rows: list[RolloutRow]) -> str:
    groups: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        groups[r.repo or r.instance_id].append(r.resolved)
    data = sorted(((k, [100 * sum(v) / len(v)]) for k, v in groups.items()), key=lambda kv: (-kv[1][0], kv[0]))
    return bar_chart(TITLES["resolved_by_repo"], data, "%", vmax=100, fmt="{:.0f}")


def durations(rows: list[RolloutRow]) -> str:
    data = []
    for p in PHASES:
        vals = [v for r in rows if (v := getattr(r.durations, p)) is not None]
        if vals:
            data.append((p, [percentile(vals, 50), percentile(vals, 95)]))
    return bar_chart(TITLES["durations"], data, " s", series=("p50", "p95"), fmt="{:.2f}")


def tokens(rows: list[RolloutRow], limit: int = 40) -> str:
    data = sorted(((r.key, [float(r.total_tokens)])
                   for r in rows), key=lambda kv: -kv[1][0])
    title = TITLES["tokens"] + (f" (top {limit} of {len(data)})" if len(data) > limit else "")
    return bar_chart(title, data[:limit], fmt="{:.0f}")


def failures(rows: list[RolloutRow]) -> str:
    counts = Counter(f"{r.failure_class} ({r.status})" for r in rows if r.failure_class)
    return bar_chart(TITLES["failures"], sorted(((k, [v]) for k, v in counts.items()),
                                                             key=lambda kv: (-kv[1][0], kv[0])), fmt="{:.0f}")


PLOTS = {"resolved_by_repo": resolved_by_repo, "durations": durations, "tokens": tokens, "failures": failures}
