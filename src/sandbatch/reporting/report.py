"""report.md: the run on one screen."""

from __future__ import annotations

from typing import Any

from ..core.config import Config
from .metrics import graded_nothing


def _pct(rate: dict[str, Any]) -> str:
    if rate["value"] is None:
        return "n/a"
    return f"{100 * rate['value']:.1f}% ({rate['numerator']}/{rate['denominator']})"


def metric_rows(m: dict[str, Any]) -> list[tuple[str, str]]:
    """The headline metrics as (name, value) rows: one table for report.md, the HTML and RST reports."""
    return [
        ("resolved (all rollouts)", _pct(m["resolved_rate"])),
        ("resolved (excluding infra errors)", _pct(m["resolved_rate_excluding_infra_errors"])),
        *[(f"pass@{k}", f"{v:.1f}") for k, v in m["pass_at_k"].items()],
        ("mean reward", str(m["mean_reward"])),
        ("infra errors", _pct(m["infra_error_rate"])),
        ("empty patches", str(m["empty_patches"])),
        ("patches that changed tests or test config", _pct(m["tampering_rate"])),
        ("patches whose code reaches into the test runner", _pct(m["suspicious_rate"])),
        ("tokens (total / mean per rollout)", f"{m['tokens']['total']} / {m['tokens']['mean_per_rollout']}"),
        *_token_rows(m.get("token_data") or {}),
    ]


def _token_rows(t: dict[str, Any]) -> list[tuple[str, str]]:
    """Token data rows, when any model call was recorded for the join."""
    if not t.get("calls"):
        return []
    return [
        ("turns with token ids and logprobs", f"{t['turns_with_tokens']} ({t['rollouts_with_tokens']} rollouts)"),
        ("model calls joined to items (unmatched calls / items)",
         f"{t['matched_calls']}/{t['calls']} ({t['unmatched_calls']} / {t['unmatched_items']})"),
        ("re-tokenisation drift (turns not extending the previous turn)", _pct(t["drift_rate"])),
    ]


def time_lines(t: dict[str, Any]) -> list[str]:
    """Where the time went, from the rollouts' traces (none when no trace file was written)."""
    kinds = {"model": "model calls", "sandbox": "sandbox operations", "tests": "tests",
             "orchestration": "orchestration (steps, scheduling, conversion)"}
    total = sum(t.get(k, 0.0) for k in kinds)
    if not t.get("rollouts") or total <= 0:
        return []
    return ["", f"Where the time went ({t['rollouts']} traced rollouts, {total:.1f} s in all): " + ", ".join(
        f"{label} {t[k]:.1f} s ({100 * t[k] / total:.0f}%)" for k, label in kinds.items()) + "."]


def _subtitle(cfg: Config, m: dict[str, Any]) -> str:
    return (f"Benchmark `{cfg.benchmark.kind}` ({m['tasks']} tasks x {cfg.repeats} repeats = {m['rollouts']} "
            f"rollouts), harness `{cfg.harness.name}`, model `{cfg.model.name}`, sandbox `{cfg.sandbox.provider}`.")


def graded_nothing_lines(cfg: Config, m: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """The report's first lines when no rollout could be graded: each failure class with one
    example error (the run exits non-zero: sandbatch.ops.workflow.exit_if_graded_nothing)."""
    if not graded_nothing(m):
        return []
    examples: dict[str, dict[str, Any]] = {}
    for r in rows:
        examples.setdefault(r["failure_class"] or "unknown", r)
    lines = [f"**Nothing was graded: all {m['rollouts']} rollouts ended in an infrastructure error, so the "
             "numbers below measure no agent.** Fix the cause, then `sandbatch rerun-errors "
             f"{cfg.run}` and the same run command.", ""]
    for cls, r in sorted(examples.items()):
        error = " ".join((r.get("error") or "no error recorded").split())
        error = error if len(error) <= 300 else error[:297] + "..."
        lines.append(f"- `{cls}` ({m['failure_classes'].get(cls, 0)} rollouts), e.g. {r['instance_id']}#{r['repeat']} "
                     f"in {r['failed_phase']}: {error}")
    return lines + [""]


def markdown(cfg: Config, m: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    title = cfg.aggregate.report_title or f"Run {cfg.run}"
    lines = [
        *graded_nothing_lines(cfg, m, rows),
        f"# {title}", "",
        _subtitle(cfg, m), "",
        "| metric | value |", "|---|---|",
        *[f"| {name} | {value} |" for name, value in metric_rows(m)],
        "",
        "Status: " + ", ".join(f"{k} {v}" for k, v in sorted(m["status_counts"].items())),
    ]
    if m["failure_classes"]:
        lines.append("Failure classes: " + ", ".join(f"{k} {v}" for k, v in sorted(m["failure_classes"].items())))
    lines += ["", "| phase | p50 s | p95 s |", "|---|---|---|"]
    lines += [f"| {p} | {v['p50']} | {v['p95']} |" for p, v in m["durations_s"].items()]
    lines += time_lines(m.get("time_s") or {})
    unresolved = [r for r in rows if not r["resolved"]][:10]
    if unresolved:
        lines += ["", "Unresolved (first 10): " + ", ".join(
            f"{r['instance_id']}#{r['repeat']} ({r['failure_class'] or r['status']})" for r in unresolved)]
    if m["suspicious_rollouts"]:
        lines += ["", f"Suspicious ({len(m['suspicious_rollouts'])}, their code reaches into the test runner; "
                      "grade.json lists the lines): " + ", ".join(m["suspicious_rollouts"][:20])]
    lines.append(f"\npass@k counts a rollout correct when reward >= {m['reward_threshold']}.")
    return "\n".join(lines) + "\n"


def _rst_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """An RST grid table (renders in docutils without extensions)."""
    cells = [header, *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    rule = lambda ch: "+" + "+".join(ch * (w + 2) for w in widths) + "+"  # noqa: E731
    line = lambda r: "|" + "|".join(f" {c.ljust(w)} " for c, w in zip(r, widths)) + "|"  # noqa: E731
    out = [rule("-"), line(header), rule("=")]
    for r in rows:
        out += [line(r), rule("-")]
    return out


def rst(cfg: Config, m: dict[str, Any]) -> str:
    """The metrics table in reStructuredText, included by the Snakemake report's pages."""
    status = ", ".join(f"{k} {v}" for k, v in sorted(m["status_counts"].items()))
    failures = ", ".join(f"{k} {v}" for k, v in sorted(m["failure_classes"].items())) or "none"
    phases = [(p, str(v["p50"]), str(v["p95"])) for p, v in m["durations_s"].items()]
    lines = [_subtitle(cfg, m).replace("`", "``"), "",
             *_rst_table(("metric", "value"), [(n, v.replace("|", "/")) for n, v in metric_rows(m)]), "",
             f"Status: {status}. Failure classes: {failures}.", "",
             *_rst_table(("phase", "p50 s", "p95 s"), phases), ""]
    return "\n".join(lines) + "\n"


def html(cfg: Config, m: dict[str, Any]) -> str:
    """A small self-contained HTML page with the metrics table (a result of the Snakemake report)."""
    from html import escape

    title = escape(cfg.aggregate.report_title or f"Run {cfg.run}")
    body = "".join(f"<tr><td>{escape(n)}</td><td>{escape(v)}</td></tr>" for n, v in metric_rows(m))
    phases = "".join(f"<tr><td>{escape(p)}</td><td>{v['p50']}</td><td>{v['p95']}</td></tr>"
                     for p, v in m["durations_s"].items())
    status = escape(", ".join(f"{k} {v}" for k, v in sorted(m["status_counts"].items())))
    failures = escape(", ".join(f"{k} {v}" for k, v in sorted(m["failure_classes"].items())) or "none")
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:1em}} table{{border-collapse:collapse;margin:.5em 0}}
td,th{{border:1px solid #ccc;padding:.25em .6em;text-align:left}} th{{background:#f3f3f3}}</style></head>
<body><h1>{title}</h1><p>{escape(_subtitle(cfg, m).replace("`", ""))}</p>
<table id="metrics"><tr><th>metric</th><th>value</th></tr>{body}</table>
<p>Status: {status}. Failure classes: {failures}.</p>
<table id="durations"><tr><th>phase</th><th>p50 s</th><th>p95 s</th></tr>{phases}</table>
</body></html>
"""
