"""report.md: the run on one screen."""

from __future__ import annotations

from typing import Any

from .config import Config


def _pct(rate: dict[str, Any]) -> str:
    if rate["value"] is None:
        return "n/a"
    return f"{100 * rate['value']:.1f}% ({rate['numerator']}/{rate['denominator']})"


def markdown(cfg: Config, m: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    title = cfg.aggregate.report_title or f"Run {cfg.run}"
    lines = [
        f"# {title}", "",
        f"Benchmark `{cfg.benchmark.kind}` ({m['tasks']} tasks x {cfg.repeats} repeats = {m['rollouts']} rollouts), "
        f"harness `{cfg.harness.name}`, model `{cfg.model.name}`, sandbox `{cfg.sandbox.provider}`.", "",
        "| metric | value |", "|---|---|",
        f"| resolved (all rollouts) | {_pct(m['resolved_rate'])} |",
        f"| resolved (excluding infra errors) | {_pct(m['resolved_rate_excluding_infra_errors'])} |",
        *[f"| pass@{k} | {v:.1f} |" for k, v in m["pass_at_k"].items()],
        f"| mean reward | {m['mean_reward']} |",
        f"| infra errors | {_pct(m['infra_error_rate'])} |",
        f"| empty patches | {m['empty_patches']} |",
        f"| tokens (total / mean per rollout) | {m['tokens']['total']} / {m['tokens']['mean_per_rollout']} |",
        "",
        "Status: " + ", ".join(f"{k} {v}" for k, v in sorted(m["status_counts"].items())),
    ]
    if m["failure_classes"]:
        lines.append("Failure classes: " + ", ".join(f"{k} {v}" for k, v in sorted(m["failure_classes"].items())))
    lines += ["", "| phase | p50 s | p95 s |", "|---|---|---|"]
    lines += [f"| {p} | {v['p50']} | {v['p95']} |" for p, v in m["durations_s"].items()]
    unresolved = [r for r in rows if not r["resolved"]][:10]
    if unresolved:
        lines += ["", "Unresolved (first 10): " + ", ".join(
            f"{r['instance_id']}#{r['repeat']} ({r['failure_class'] or r['status']})" for r in unresolved)]
    lines.append(f"\npass@k counts a rollout correct when reward >= {m['reward_threshold']}.")
    return "\n".join(lines) + "\n"
