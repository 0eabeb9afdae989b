"""One rollout's page: prompt, conversation, patch, grade, timings and model usage.

Everything is rendered here into static HTML (no script), so the page reads the same in
any browser, in `snakemake --report` and in a text dump of its DOM.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any, Iterable, Mapping

from ...contracts.records import GRADE, MODEL_CALLS, PATCH, RESPONSE, GradeRecord, load
from ...contracts.response import RunData
from ...contracts.row import RolloutRow
from ...core.util import read_json
from ...rollout.responses import input_text, item_text
from ...rollout.usage import iter_calls
from ...trace import TRACE_FILE, read_spans
from ..outcomes import outcome
from .assets import CSS
from .waterfall import waterfall_html

FOLD_CHARS = 2000  # a text longer than this (or than FOLD_LINES lines) shows its head and a "show all"
FOLD_LINES = 40
HEAD_LINES = 20  # the head of a folded text: this many lines, at most FOLD_CHARS characters
LOG_TAIL_LINES = 80
EXIT_KEYS = ("returncode", "exit_code", "exit_status")  # where a command result holds its exit status
RESULT_KEYS = {"output", "exception_info", *EXIT_KEYS}  # a JSON command result: nothing else is dropped


def size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KB" if n < 1024 ** 2 else f"{n / 1024 ** 2:.1f} MB"


def _pre(text: str, label: str) -> str:
    """A <pre> block; a long one shows its first lines and folds the whole text behind "show all"."""
    lines = len(text.splitlines()) or 1
    if len(text) <= FOLD_CHARS and lines <= FOLD_LINES:
        return f"<pre>{escape(text)}</pre>"
    head = "\n".join(text.split("\n", HEAD_LINES)[:HEAD_LINES])[:FOLD_CHARS]
    return (f'<div class="fold"><pre class="head">{escape(head)}\n\u2026</pre><details><summary>show all '
            f'{escape(label)} ({lines} lines, {size(len(text.encode()))})</summary><pre>{escape(text)}</pre>'
            f"</details></div>")


def tool_result(output: str) -> tuple[str, Any]:
    """(the text the agent saw, its exit status or None) of a tool output. A string holding a
    JSON object with an `output` (and a `returncode`), as mini-swe-agent's observations are,
    or a JSON string literal, is unwrapped; any other text is shown as it is."""
    stripped = output.strip()
    if not stripped.startswith(("{", '"')):
        return output, None
    try:
        value = json.loads(stripped)
    except ValueError:
        return output, None
    if isinstance(value, str):
        return value, None
    if not (isinstance(value, dict) and isinstance(value.get("output"), str) and set(value) <= RESULT_KEYS):
        return output, None
    text = value["output"]
    if value.get("exception_info"):
        text += ("\n" if text and not text.endswith("\n") else "") + str(value["exception_info"])
    status = next((value[k] for k in EXIT_KEYS if value.get(k) is not None), None)
    return text, status


def _output_html(output: str, role: str) -> str:
    """A tool output as the agent saw it, its exit status beside the role."""
    text, status = tool_result(output if isinstance(output, str) else json.dumps(output, ensure_ascii=False))
    badge = ""
    if status is not None:
        ok = status in (0, "0")
        badge = f' <span class="exit {"ok" if ok else "fail"}">exit {escape(str(status))}</span>'
    return f'<div class="turn tool-output"><div class="role">{escape(role)}{badge}</div>{_pre(text, "output")}</div>'


def args_text(arguments: str) -> str:
    """A tool call's arguments as text: a string argument as its lines (a bash command reads
    as the script it is), `name: value` per argument when there are several, JSON for the rest."""
    try:
        value = json.loads(arguments)
    except (TypeError, ValueError):
        return arguments
    if not isinstance(value, dict) or not value:
        return json.dumps(value, indent=2, ensure_ascii=False)
    text = {k: v if isinstance(v, str) else json.dumps(v, indent=2, ensure_ascii=False) for k, v in value.items()}
    if len(text) == 1:
        return next(iter(text.values()))
    return "\n".join(f"{k}:\n{v}" if "\n" in v else f"{k}: {v}" for k, v in text.items())


def _said(cls: str, role: str, text: str) -> str:
    """A message the model was given (system prompt, task prompt, the harness's feedback)."""
    return f'<div class="turn {cls}"><div class="role">{escape(role)}</div>{_pre(text, role)}</div>'


def conversation(prompt: str | None, items: Iterable[Mapping[str, Any]], instructions: str | None = None,
                 feedback: Iterable[Mapping[str, Any]] = ()) -> str:
    """The system prompt, the task prompt and the Responses items in order; each tool call
    carries its output; the harness's feedback after the item it followed (response.json
    `sandbatch.feedback`; one whose item is gone, at the end)."""
    items = list(items)
    outputs = {it.get("call_id"): it for it in items if it.get("type") == "function_call_output"}
    after: dict[Any, list[str]] = {}
    for f in feedback:
        after.setdefault(f.get("after"), []).append(str(f.get("text", "")))
    out = []
    if instructions:
        out.append(_said("system", "system prompt", instructions))
    if prompt is not None:
        out.append(_said("user", "prompt", prompt))
    out += [_said("feedback", "harness feedback", t) for t in after.pop(None, [])]
    paired, prev = set(), None
    for it in items:
        out += [_said("feedback", "harness feedback", t) for t in after.pop(prev, [])] if prev else []
        prev = it.get("id")
        kind = it.get("type")
        if kind == "message":
            out.append(f'<div class="turn assistant"><div class="role">assistant</div><pre>{escape(item_text(it))}</pre></div>')
        elif kind == "reasoning":
            text = item_text(it)
            out.append(f'<details class="turn reasoning"><summary class="role">reasoning ({size(len(text.encode()))})'
                       f'</summary><pre>{escape(text)}</pre></details>')
        elif kind == "function_call":
            call_id = it.get("call_id")
            result = outputs.get(call_id)
            html = (f'<div class="turn tool-call"><div class="role">tool call <span class="fname">{escape(it.get("name", ""))}'
                    f'</span> <span class="muted">{escape(call_id or "")}</span></div>'
                    f'{_pre(args_text(it.get("arguments", "")), "arguments")}')
            if result is not None:
                paired.add(call_id)
                html += _output_html(result.get("output", ""), "output")
            out.append(html + "</div>")
        elif kind == "function_call_output":
            if it.get("call_id") not in paired:
                out.append(_output_html(it.get("output", ""), f'output of {it.get("call_id") or "?"}'))
        else:
            out.append(f'<div class="turn"><div class="role">{escape(str(kind))}</div>'
                       f'{_pre(json.dumps(it, indent=2, ensure_ascii=False), str(kind))}</div>')
    out += [_said("feedback", "harness feedback", t) for texts in after.values() for t in texts]
    return "\n".join(out)


def diff_html(patch: str) -> str:
    if not patch.strip():
        return '<p class="muted">empty patch</p>'
    lines = []
    for line in patch.splitlines():
        cls = ("file" if line.startswith(("diff ", "+++", "---", "index ", "new file", "deleted file"))
               else "hunk" if line.startswith("@@") else "add" if line.startswith("+")
               else "del" if line.startswith("-") else "")
        lines.append(f'<span class="{cls}">{escape(line) or " "}</span>')
    return f'<pre class="diff">{"".join(lines)}</pre>'


def _kv(rows: Iterable[tuple[str, Any]]) -> str:
    return '<table class="kv">' + "".join(
        f"<tr><td>{escape(k)}</td><td>{escape('' if v is None else str(v))}</td></tr>" for k, v in rows) + "</table>"


GRADE_LABELS = ("reward", "resolved", "status", "failure class", "patch applied", "apply method", "tests ran",
                "test exit code", "error")


def grade_html(grade: GradeRecord | None, log_tail: str | None) -> str:
    """grade.json's outcome, its tests and the grader log's tail (None: no grade.json, every value blank)."""
    g = grade if grade is not None else GradeRecord()
    values = ((g.reward, g.resolved, g.status, g.failure_class, g.patch_applied, g.apply_method, g.tests_ran,
               g.test_exit_code, g.error) if grade is not None else (None,) * len(GRADE_LABELS))
    parts = [_kv(zip(GRADE_LABELS, values))]
    results = g.test_results
    rows = []
    for group, by_outcome in g.tests_status.items():  # FAIL_TO_PASS / PASS_TO_PASS
        for outcome, names in by_outcome.items():  # success / failure
            for name in names:
                status = results.get(name, outcome)
                rows.append(f'<tr><td>{escape(group)}</td><td>{escape(name)}</td>'
                            f'<td class="{escape(str(status))}">{escape(str(status))}</td></tr>')
    if rows:
        parts.append(f'<table id="tests"><tr><th>group</th><th>test</th><th>status</th></tr>{"".join(rows)}</table>')
    if log_tail:
        parts.append(f"<h3>Grader log (last {LOG_TAIL_LINES} lines)</h3>{_pre(log_tail, 'grader log')}")
    return "\n".join(parts)


def flags_html(grade: GradeRecord | None) -> str:
    """What grading found the patch doing to the tests (tampering) or the test runner
    (suspicious code): shown first on the page, before anything else is read."""
    parts = []
    tampering = grade.tampering if grade is not None else []
    if tampering:
        body = "".join(f"<tr><td>{escape(str(t.get('path')))}</td><td>{escape(str(t.get('kind')))}</td>"
                       f"<td>{escape(str(t.get('action')))}</td></tr>" for t in tampering)
        parts.append(f'<h3>Tampering</h3><table id="tampering"><tr><th>path</th><th>kind</th><th>action</th></tr>{body}</table>')
    suspicious = grade.suspicious if grade is not None else []
    if suspicious:
        body = "".join(f"<tr><td>{escape(str(s.get('path')))}:{escape(str(s.get('line')))}</td>"
                       f"<td>{escape(str(s.get('reason')))}</td><td><code>{escape(str(s.get('text')))}</code></td></tr>"
                       for s in suspicious)
        parts.append(f'<h3>Suspicious code (reaches into the test runner)</h3><table id="suspicious">'
                     f'<tr><th>line</th><th>why</th><th>code</th></tr>{body}</table>')
    return f'<div id="flags">{"".join(parts)}</div>' if parts else ""


def _log_tail(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    return "\n".join(text.splitlines()[-LOG_TAIL_LINES:])


def calls_html(path: Path) -> str:
    rows = []
    for i, c in enumerate(iter_calls(path), 1):
        u = c.get("usage") or {}
        rows.append(f"<tr><td>{i}</td><td>{escape(str(c.get('endpoint', '')))}</td><td>{escape(str(c.get('status')))}</td>"
                    f"<td>{c.get('latency_s', '')}</td><td>{u.get('prompt_tokens', '')}</td>"
                    f"<td>{u.get('completion_tokens', '')}</td><td>{u.get('cached_tokens', '')}</td></tr>")
    if not rows:
        return '<p class="muted">no model calls</p>'
    return (f'<details><summary>{len(rows)} model call(s)</summary><table><tr><th>#</th><th>endpoint</th><th>status</th>'
            f'<th>latency s</th><th>prompt tokens</th><th>completion tokens</th><th>cached</th></tr>{"".join(rows)}</table></details>')


def _outcome_class(row: RolloutRow) -> str:
    return "res-yes" if row.resolved else "res-none" if row.infra_error else "res-no"


def render(row: RolloutRow, prompt: str | None, index_href: str) -> str:
    """The page of one rollout; `row` is its rollouts.jsonl row (rollout.rows.rollout_row)."""
    d = Path(row.dir)
    resp = read_json(d / RESPONSE) if (d / RESPONSE).is_file() else {}
    grade = load(GradeRecord, d / GRADE) if (d / GRADE).is_file() else None
    patch = (d / PATCH).read_bytes().decode("utf-8", "replace") if (d / PATCH).is_file() else ""
    usage, join = row.usage, row.token_join  # the response's, as the row copied them
    title = f"{row.instance_id} #{row.repeat}"
    summary = _kv([("task", row.task_id), ("repository", row.repo), ("repeat", row.repeat),
                   ("status", row.status), ("failure class", row.failure_class),
                   ("failed phase", row.failed_phase), ("reward", row.reward),
                   ("resolved", row.resolved), ("harness", row.harness),
                   ("exit code", row.exit_code), ("model", resp.get("model"))])
    timings = "".join(f"<tr><td>{escape(p)}</td><td>{'' if v is None else f'{v:.2f}'}</td></tr>"
                      for p, v in row.durations.model_dump().items())
    run = RunData.of(resp)
    tokens = _kv([("model calls", usage.model_calls), ("input tokens", usage.input_tokens),
                  ("cached input tokens", usage.input_tokens_details.cached_tokens),
                  ("output tokens", usage.output_tokens),
                  ("reasoning tokens", usage.output_tokens_details.reasoning_tokens),
                  ("total tokens", usage.total_tokens),
                  # token data: the turns carrying it, the join, the drift (docs/training-data.md)
                  *([("turns with token ids", join.turns_with_tokens),
                     ("calls / items not joined", f"{join.unmatched_calls} / {join.unmatched_items}"),
                     ("drifted turns", f"{join.drifted_turns} of {join.continuing_turns}")]
                    if join and join.calls else []),
                  # response.json written before segments were counted has none
                  *([("segments / untrusted turns", f"{join.segments} / {join.untrusted_turns}")]
                    if join and join.calls and join.segments is not None else [])])
    notes = ""
    if run.unknown_events or run.conversion_error:
        notes = (f'<p class="muted">{run.unknown_events} event(s) the converter did not recognise'
                 + (f"; conversion error: {escape(run.conversion_error)}" if run.conversion_error else "")
                 + "</p>")
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{escape(title)}</title><style>{CSS}</style></head>
<body><p><a href="{escape(index_href)}">&larr; all rollouts</a></p>
<h1>{escape(title)} <span class="{_outcome_class(row)}">{escape(outcome(row))}</span></h1>
{flags_html(grade)}
{summary}
<h2>Conversation</h2>{notes}
<div id="conversation">{conversation(input_text(resp["input"]) if resp.get("input") else prompt,
                                      resp.get("output") or [], resp.get("instructions"), run.feedback)}</div>
<h2>Patch <span class="muted">{size(len(patch.encode()))}</span></h2>{diff_html(patch)}
<h2>Grade</h2>{grade_html(grade, _log_tail(d / "grade.log"))}
<h2>Timings</h2><table id="timings"><tr><th>phase</th><th>seconds</th></tr>{timings}</table>
<h2>Trace</h2>{waterfall_html(read_spans(d / TRACE_FILE))}
<h2>Model calls and tokens</h2>{tokens}{calls_html(d / MODEL_CALLS)}
</body></html>
"""
