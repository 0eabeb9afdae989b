"""Static trajectory viewer: an index of every rollout and one page per rollout.

`build` writes `index.html` (one short row per rollout, inline: file:// pages may not
fetch) and `rollouts/<task>/<repeat>.html`. Nothing needs a server: the index renders its
rows a chunk at a time as they scroll into view, and a rollout page is only read when it
is opened. The aggregate writes it into the report (`results/<run>/report/view/`), and
`sandbatch view <run>` there too (or where -o says).
"""

from __future__ import annotations

import json
import shutil
from html import escape
from pathlib import Path
from typing import Any, Iterable

from ...contracts.records import GRADE
from ...contracts.row import RolloutRow
from ...core.config import Config
from ...core.util import write_atomic
from ...rollout.rows import rollout_row
from ...tasks import read_task, select_tasks
from ...tasks.settings import prompt_for
from ..outcomes import category, flagged, rollout_seconds, summary_line
from . import page
from .assets import CSS, INDEX_JS

# `outcome`: resolved / unresolved / infra_error (outcomes.category), what the filter picks from
VIEW_DIR = "report/view"  # under results/<run>/: the run's aggregate and `sandbatch view` write it here
COLUMNS = ("task", "repeat", "repo", "resolved", "status", "failure_class", "reward", "tokens", "duration", "href",
           "outcome", "flagged")


def page_href(row: RolloutRow) -> str:
    return f"rollouts/{row.task_id}/{row.repeat}.html"


def index_row(row: RolloutRow) -> list[Any]:
    # an infrastructure error earned or lost no reward: none is shown
    return [row.instance_id, row.repeat, row.repo, row.resolved, row.status, row.failure_class,
            None if row.infra_error else row.reward, row.total_tokens, rollout_seconds(row), page_href(row),
            category(row), flagged(row)]


def flagged_html(rows: Iterable[RolloutRow]) -> str:
    """The rollouts whose code reaches into the test runner (grade.json `suspicious`): a count and links."""
    flagged = [r for r in rows if r.suspicious]
    if not flagged:
        return ""
    links = ", ".join(f'<a href="{escape(page_href(r))}">{escape(r.key)}</a>' for r in flagged)
    return f'<p id="suspicious">Suspicious code in {len(flagged)} rollouts: {links}</p>'


def index_html(rows: list[list[Any]], title: str, subtitle: str, flags: str = "", summary: str = "") -> str:
    heads = [("task", "task"), ("repeat", "repeat"), ("repo", "repository"), ("resolved", "resolved"),
             ("status", "status"), ("failure_class", "failure class"), ("reward", "reward"), ("tokens", "tokens"),
             ("duration", "duration s")]
    data = json.dumps(rows, separators=(",", ":")).replace("</", "<\\/")  # a task id cannot end the script
    th = "".join(f'<th class="sort" data-key="{k}">{escape(label)}</th>' for k, label in heads)
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{escape(title)}</title><style>{CSS}</style></head>
<body><h1>{escape(title)}</h1><p id="summary"><b>{escape(summary)}</b></p><p>{escape(subtitle)}</p>{flags}
<div class="filters"><label>show <select id="f-outcome"><option value="">all</option>
<option value="resolved">resolved</option><option value="unresolved">unresolved</option>
<option value="infra_error">infra error</option><option value="flagged">flagged</option></select></label>
<label>status <select id="f-status"><option value="">all</option></select></label>
<label>repository <select id="f-repo"><option value="">all</option></select></label>
<label>task <input id="f-text" type="search" placeholder="filter by task id"></label>
<span id="count" class="muted"></span></div>
<table id="rollouts"><thead><tr>{th}</tr></thead><tbody id="rows"></tbody></table>
<p id="more" class="muted">loading more&hellip;</p>
<noscript>The table needs JavaScript; the pages are under rollouts/.</noscript>
<script>var ROLLOUT_COLUMNS = {json.dumps(COLUMNS)};
var ROLLOUT_ROWS = {data};</script>
<script>{INDEX_JS}</script>
</body></html>
"""


def write_index(out: Path, rows: list[list[Any]], title: str, subtitle: str, flags: str = "",
                summary: str = "") -> None:
    """index.html, its rows (as `index_row` makes them) inline: one file, as the report embeds it."""
    write_atomic(out / "index.html", index_html(rows, title, subtitle, flags, summary))


def _prompts(cfg: Config) -> dict[str, str | None]:
    """The prompt each task's agent got, as the harness step built it (None when unreadable)."""
    out: dict[str, str | None] = {}
    for ref in select_tasks(cfg.benchmark):
        try:
            out[ref.id] = prompt_for(read_task(cfg.benchmark, ref), cfg.benchmark)
        except Exception:  # a task file changed since the run: show the rest without its prompt
            out[ref.id] = None
    return out


def finished_rows(cfg: Config) -> list[RolloutRow]:
    """rollouts.jsonl rows of every rollout graded so far (the viewer works during a run too)."""
    return [rollout_row(cfg, t, r) for t in select_tasks(cfg.benchmark) for r in range(cfg.repeats)
            if (cfg.run_dir / t.id / str(r) / GRADE).is_file()]


def build(cfg: Config, rows: Iterable[RolloutRow], out_dir: str | Path) -> Path:
    """Write the viewer for `rows` (rollouts.jsonl rows) into out_dir; returns index.html."""
    out, rows = Path(out_dir), list(rows)
    shutil.rmtree(out / "rollouts", ignore_errors=True)  # pages of rollouts no longer in the run
    prompts = _prompts(cfg)
    for row in rows:
        write_atomic(out / page_href(row), page.render(row, prompts.get(row.task_id), "../../index.html"))
    subtitle = (f"Benchmark {cfg.benchmark.kind}, harness {cfg.harness.name}, model {cfg.model.name}. "
                "Click a column to sort; open a task for its trajectory.")
    write_index(out, [index_row(r) for r in rows], f"Trajectories of run {cfg.run}", subtitle, flagged_html(rows),
                summary_line(rows))
    return out / "index.html"

