"""A rollout's trace (trace.jsonl) as a waterfall.

Static HTML: one row per span, indented under its parent, a bar placed on the rollout's
time axis, its duration beside it. Spans are classed by what their time was spent on
(sandbatch.trace.kind_of): model calls, sandbox operations, tests, and the orchestration
around them.
"""

from __future__ import annotations

from html import escape
from typing import Any, Mapping

from ...trace import KINDS, kind_of

MAX_ROWS = 2000  # a longer trace shows its first spans and says how many were left out


def _ns(span: Mapping[str, Any], key: str) -> int:
    return int(span.get(key) or 0)


def _ordered(spans: list[Mapping[str, Any]]) -> list[tuple[int, Mapping[str, Any]]]:
    """(depth, span) in tree order: each span after its parent, siblings by start time."""
    ids = {s["spanId"] for s in spans}
    children: dict[str | None, list] = {}
    for s in spans:
        parent = s.get("parentSpanId")
        children.setdefault(parent if parent in ids else None, []).append(s)
    out: list[tuple[int, Mapping[str, Any]]] = []
    stack = [(0, s) for s in sorted(children.get(None, []), key=lambda s: -_ns(s, "startTimeUnixNano"))]
    while stack:
        depth, s = stack.pop()
        out.append((depth, s))
        stack += [(depth + 1, c) for c in sorted(children.get(s["spanId"], []),
                                                  key=lambda c: -_ns(c, "startTimeUnixNano"))]
    return out


def _label(span: Mapping[str, Any]) -> str:
    attrs = span.get("attributes") or {}
    detail = attrs.get("sandbox.command") or attrs.get("sandbox.path") or ""
    if attrs.get("sandbox.exit_code") is not None:
        detail += f" → exit {attrs['sandbox.exit_code']}"
    if attrs.get("llm.token_count.prompt") is not None:
        detail = f"{attrs['llm.token_count.prompt']} in / {attrs.get('llm.token_count.completion', 0)} out tokens"
    if attrs.get("sandbatch.unfinished"):
        detail = "unfinished (the step was killed)"
    return detail


def waterfall_html(spans: list[Mapping[str, Any]]) -> str:
    if not spans:
        return '<p class="muted">no trace (traces.exporters names no file)</p>'
    start = min(_ns(s, "startTimeUnixNano") for s in spans)
    end = max(max(_ns(s, "endTimeUnixNano"), _ns(s, "startTimeUnixNano")) for s in spans)
    total = max(end - start, 1)
    rows = []
    ordered = _ordered(spans)
    for depth, s in ordered[:MAX_ROWS]:
        t0, t1 = _ns(s, "startTimeUnixNano"), max(_ns(s, "endTimeUnixNano"), _ns(s, "startTimeUnixNano"))
        left, width = 100 * (t0 - start) / total, max(100 * (t1 - t0) / total, 0.15)
        failed = (s.get("status") or {}).get("code") == 2
        cls = f"bar k-{kind_of(s)}" + (" failed" if failed else "")
        title = f"{s['name']}: {(t1 - t0) / 1e9:.3f} s" + (f" ({_label(s)})" if _label(s) else "")
        rows.append(
            f'<tr class="span"><td class="sname" style="padding-left:{0.3 + depth}em" title="{escape(title)}">'
            f'{escape(s["name"])} <span class="muted">{escape(_label(s))}</span></td>'
            f'<td class="dur">{(t1 - t0) / 1e9:.3f}</td><td class="track"><div class="{cls}" '
            f'style="left:{left:.3f}%;width:{width:.3f}%"></div></td></tr>')
    more = (f'<p class="muted">{len(ordered) - MAX_ROWS} more spans not shown (all are in trace.jsonl)</p>'
            if len(ordered) > MAX_ROWS else "")
    legend = " ".join(f'<span class="bar-key k-{k}"></span>{k}' for k in KINDS)
    return (f'<p class="muted">{len(spans)} spans over {total / 1e9:.2f} s. {legend}</p>'
            f'<table id="waterfall"><tr><th class="sname">span</th><th class="dur">s</th><th class="track">'
            f'0 &ndash; {total / 1e9:.2f} s</th></tr>{"".join(rows)}</table>{more}')
