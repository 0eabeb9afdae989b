"""report.md: the run on one screen."""

from __future__ import annotations

from ..contracts.metrics import Cost, Metrics, Rate, TimeSpent, TokenData
from ..contracts.row import RolloutRow
from ..core.config import Config
from . import outcomes
from .plots import PLOTS, TITLES
from .view import VIEW_DIR


def _pct(rate: Rate) -> str:
    if rate.value is None:
        return "n/a"
    return f"{100 * rate.value:.1f}% ({rate.numerator}/{rate.denominator})"


def metric_rows(m: Metrics) -> list[tuple[str, str]]:
    """The headline metrics as (name, value) rows: one table for report.md, the HTML and RST reports."""
    return [
        ("resolved (all rollouts)", _pct(m.resolved_rate)),
        ("resolved (excluding infra errors)", _pct(m.resolved_rate_excluding_infra_errors)),
        *[(f"pass@{k}", f"{v:.1f}") for k, v in m.pass_at_k.items()],
        ("mean reward", str(m.mean_reward)),
        ("infra errors", _pct(m.infra_error_rate)),
        ("empty patches", str(m.empty_patches)),
        ("patches that changed tests or test config", _pct(m.tampering_rate)),
        ("patches whose code reaches into the test runner", _pct(m.suspicious_rate)),
        ("tokens (total / mean per rollout)", f"{m.tokens.total} / {m.tokens.mean_per_rollout}"),
        *_token_rows(m.token_data),
        *_cost_rows(m.cost),
    ]


def _cost_rows(c: Cost | None) -> list[tuple[str, str]]:
    """The run's cost, when model.prices gives the model's prices."""
    if not c:
        return []
    money = lambda x: f"{x:,.2f}" if x >= 1 else f"{x:.3g}"  # noqa: E731 (small runs cost fractions of a cent)
    return [("cost at model.prices (total / per rollout)",
             f"{money(c.total)} / {money(c.per_rollout or 0)} "
             f"({money(c.input)} input + {money(c.output)} output)")]


def _token_rows(t: TokenData) -> list[tuple[str, str]]:
    """Token data rows, when any model call was recorded for the join."""
    if not t.calls:
        return []
    return [
        ("turns with token ids and logprobs", f"{t.turns_with_tokens} ({t.rollouts_with_tokens} rollouts)"),
        ("model calls joined to items (unmatched calls / items)",
         f"{t.matched_calls}/{t.calls} ({t.unmatched_calls} / {t.unmatched_items})"),
        ("re-tokenisation drift (turns not extending the previous turn)", _pct(t.drift_rate)),
        ("segments (rollouts whose history was rewritten)", f"{t.segments} ({t.rollouts_rewritten} rollouts)"),
        ("untrusted turns (ids left off for a trainer to mask)", _pct(t.untrusted_rate)),
    ]


TIME_KINDS = {"model": "model calls", "agent": "the agent's commands and harness", "sandbox": "sandbox operations",
              "tests": "tests", "orchestration": "orchestration (steps, scheduling, conversion)"}


def time_sentence(t: TimeSpent) -> str:
    """Where the time went (metrics.json `time_s`: from traces, else the step records); "" for none."""
    seconds = {k: s for k in TIME_KINDS if (s := getattr(t, k)) is not None}  # the kinds its source splits off
    total = sum(seconds.values())
    if not t.rollouts or total <= 0:
        return ""
    which = "traced rollouts" if t.source == "traces" else "rollouts, from their step records"
    return f"Where the time went ({t.rollouts} {which}, {total:.1f} s in all): " + ", ".join(
        f"{TIME_KINDS[k]} {s:.1f} s ({100 * s / total:.0f}%)" for k, s in seconds.items()) + "."


def time_lines(t: TimeSpent) -> list[str]:
    sentence = time_sentence(t)
    return ["", sentence] if sentence else []


TASK_HEADER = ("task", "resolved", "status or failure class", "tokens", "time s")


def task_cells(rows: list[RolloutRow]) -> list[tuple[str, ...]]:
    """The per-task table's cells (outcomes.task_rows): resolved as k/n over the repeats."""
    return [(t.task, f"{t.resolved}/{t.repeats}", t.outcome, str(t.tokens),
             "" if t.time_s is None else f"{t.time_s:.1f}") for t in outcomes.task_rows(rows)]


RERUN = "`sandbatch rerun-errors <run>`, then the same run command, redoes them"
INFRA_HEADER = ("class", "rollouts", "example", "step", "error")


def infra_cells(rows: list[RolloutRow]) -> list[tuple[str, ...]]:
    """The infrastructure errors by class, one example each (outcomes.infra_errors)."""
    return [(e.failure_class, str(e.rollouts), e.example, e.phase or "", e.error)
            for e in outcomes.infra_errors(rows)]


def _md_table(header: tuple[str, ...], cells: list[tuple[str, ...]]) -> list[str]:
    esc = lambda c: c.replace("|", "\\|").replace("\n", " ")  # noqa: E731
    return [f"| {' | '.join(header)} |", "|" + "---|" * len(header),
            *[f"| {' | '.join(esc(c) for c in row)} |" for row in cells]]


def task_lines(rows: list[RolloutRow]) -> list[str]:
    """report.md's per-task table: every task, what became of its repeats, its tokens and time."""
    if not rows:
        return []
    return ["", "## Tasks", "", outcomes.summary_line(rows), "", *_md_table(TASK_HEADER, task_cells(rows))]


def infra_lines(rows: list[RolloutRow]) -> list[str]:
    """report.md's infrastructure errors by class (no reward: they are not the agent's)."""
    cells = infra_cells(rows)
    if not cells:
        return []
    return ["", "## Infrastructure errors", "",
            f"Not the agent's doing, so no reward; {RERUN}.", "",
            *_md_table(INFRA_HEADER, cells)]


def plot_lines() -> list[str]:
    """The plots, beside report.md under report/."""
    return ["", "## Plots", *[line for name in PLOTS for line in ("", f"![{TITLES[name]}](report/{name}.svg)")]]


def _subtitle(cfg: Config, m: Metrics) -> str:
    return (f"Benchmark `{cfg.benchmark.kind}` ({m.tasks} tasks x {cfg.repeats} repeats = {m.rollouts} "
            f"rollouts), harness `{cfg.harness.name}`, model `{cfg.model.name}`, sandbox `{cfg.sandbox.provider}`.")


def graded_nothing_lines(cfg: Config, m: Metrics, rows: list[RolloutRow]) -> list[str]:
    """The report's first lines when no rollout could be graded: each failure class with one
    example error (the run exits non-zero: sandbatch.ops.workflow.exit_if_graded_nothing)."""
    if not m.graded_nothing:
        return []
    examples: dict[str, RolloutRow] = {}
    for r in rows:
        examples.setdefault(r.failure_class or "unknown", r)
    lines = [f"**Nothing was graded: all {m.rollouts} rollouts ended in an infrastructure error, so the "
             "numbers below measure no agent.** Fix the cause, then `sandbatch rerun-errors "
             f"{cfg.run}` and the same run command.", ""]
    for cls, r in sorted(examples.items()):
        error = " ".join((r.error or "no error recorded").split())
        error = error if len(error) <= 300 else error[:297] + "..."
        lines.append(f"- `{cls}` ({m.failure_classes.get(cls, 0)} rollouts), e.g. {r.key} "
                     f"in {r.failed_phase}: {error}")
    return lines + [""]


def markdown(cfg: Config, m: Metrics, rows: list[RolloutRow]) -> str:
    title = cfg.aggregate.report_title or f"Run {cfg.run}"
    lines = [
        *graded_nothing_lines(cfg, m, rows),
        f"# {title}", "",
        _subtitle(cfg, m), "",
        "| metric | value |", "|---|---|",
        *[f"| {name} | {value} |" for name, value in metric_rows(m)],
        "",
        "Status: " + ", ".join(f"{k} {v}" for k, v in sorted(m.status_counts.items())),
    ]
    if m.failure_classes:
        lines.append("Failure classes: " + ", ".join(f"{k} {v}" for k, v in sorted(m.failure_classes.items())))
    lines += ["", "| phase | p50 s | p95 s |", "|---|---|---|"]
    lines += [f"| {p} | {v.p50} | {v.p95} |" for p, v in m.durations_s.items()]
    lines += time_lines(m.time_s)
    if m.suspicious_rollouts:
        lines += ["", f"Suspicious ({len(m.suspicious_rollouts)}, their code reaches into the test runner; "
                      "grade.json lists the lines): " + ", ".join(m.suspicious_rollouts[:20])]
    lines.append(f"\npass@k counts a rollout correct when reward >= {m.reward_threshold}.")
    lines += infra_lines(rows)
    lines += task_lines(rows)
    lines += plot_lines()
    lines += ["", f"Each rollout's trajectory: [{VIEW_DIR}/index.html]({VIEW_DIR}/index.html)."]
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


def rst(cfg: Config, m: Metrics) -> str:
    """The metrics table in reStructuredText, included by the Snakemake report's pages."""
    status = ", ".join(f"{k} {v}" for k, v in sorted(m.status_counts.items()))
    failures = ", ".join(f"{k} {v}" for k, v in sorted(m.failure_classes.items())) or "none"
    phases = [(p, str(v.p50), str(v.p95)) for p, v in m.durations_s.items()]
    lines = [_subtitle(cfg, m).replace("`", "``"), "",
             *_rst_table(("metric", "value"), [(n, v.replace("|", "/")) for n, v in metric_rows(m)]), "",
             f"Status: {status}. Failure classes: {failures}.", "",
             *_rst_table(("phase", "p50 s", "p95 s"), phases), ""]
    return "\n".join(lines) + "\n"


def _html_table(ident: str, header: tuple[str, ...], cells: list[tuple[str, ...]]) -> str:
    from html import escape

    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in cells)
    return f'<table id="{ident}"><tr>{head}</tr>{body}</table>'


def html(cfg: Config, m: Metrics, rows: list[RolloutRow], svgs: dict[str, str]) -> str:
    """A self-contained HTML page (a result of the Snakemake report): the metrics, the
    infrastructure errors by class, the per-task table and the plots (`svgs`, inline: the
    Snakemake report shows the page without the files beside it)."""
    from html import escape

    title = escape(cfg.aggregate.report_title or f"Run {cfg.run}")
    phases = [(p, str(v.p50), str(v.p95)) for p, v in m.durations_s.items()]
    status = escape(", ".join(f"{k} {v}" for k, v in sorted(m.status_counts.items())))
    failures = escape(", ".join(f"{k} {v}" for k, v in sorted(m.failure_classes.items())) or "none")
    cells = infra_cells(rows)
    infra = (f"<h2>Infrastructure errors</h2><p>Not the agent's doing, so no reward; {escape(RERUN.replace('`', ''))}."
             f"</p>{_html_table('infra', INFRA_HEADER, cells)}" if cells else "")
    time = time_sentence(m.time_s)
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:1em;max-width:1200px}} table{{border-collapse:collapse;margin:.5em 0}}
td,th{{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}} th{{background:#f3f3f3}}
h2{{font-size:1.15em;margin-top:1.4em;border-bottom:1px solid #ddd}} .plots svg{{max-width:100%;height:auto;margin:.5em 0}}
#tasks td:nth-child(2),#tasks td:nth-child(4),#tasks td:nth-child(5){{text-align:right}}</style></head>
<body><h1>{title}</h1><p>{escape(_subtitle(cfg, m).replace("`", ""))}</p>
<p id="summary">{escape(outcomes.summary_line(rows))}</p>
{_html_table("metrics", ("metric", "value"), metric_rows(m))}
<p>Status: {status}. Failure classes: {failures}.</p>
{_html_table("durations", ("phase", "p50 s", "p95 s"), phases)}
{f"<p>{escape(time)}</p>" if time else ""}
{infra}
<h2>Tasks</h2>
{_html_table("tasks", TASK_HEADER, task_cells(rows))}
<h2>Plots</h2><div class="plots">{"".join(svgs.values())}</div>
</body></html>
"""
