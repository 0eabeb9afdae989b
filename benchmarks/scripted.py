"""The scripted model for benchmarks of model-driven harnesses, shared by the scale benchmarks.

Per smoke task, `turns` model turns through the bash tool: look at the repository
(turns - 2 commands), apply the task's gold patch, then submit. Every rollout thus makes
the same number of model calls, runs real commands in its sandbox and is graded as
resolved, like an oracle rollout. The server runs on a thread of the benchmark process,
so its CPU is not counted in the run's process tree.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / "data" / "smoke" / "tasks.jsonl"
LOOK = ("pwd", "ls")  # cheap: what is measured is the orchestration of a turn, not the command
SUBMIT = {"content": "Submitting.", "tool_calls": [{"name": "bash", "arguments": {
    "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}]}


def script(turns: int, pause: float = 0.0, rows: list[dict] | None = None) -> dict:
    """The scripted model's script: every smoke task (or every task row of `rows`: their
    problem_statement and patch) fixed in exactly `turns` model turns (>= 2); each look also
    sleeps `pause` seconds in the sandbox (an agent of about that duration)."""
    tasks = {}
    sleep = f"sleep {pause:g}; " if pause else ""
    if rows is None:
        rows = [json.loads(line) for line in SMOKE.read_text().splitlines()]
    for row in rows:
        looks = [{"content": f"Looking ({i + 1}).", "tool_calls": [{"name": "bash", "arguments": {
            "command": sleep + LOOK[i % len(LOOK)]}}]} for i in range(turns - 2)]
        fix = {"content": "Applying the fix.", "tool_calls": [{"name": "bash", "arguments": {
            "command": f"git apply <<'PATCH_EOF'\n{row['patch']}PATCH_EOF"}}]}
        tasks[row["problem_statement"].splitlines()[0]] = [*looks, fix]
    return {"tasks": tasks, "final": SUBMIT}


@contextlib.contextmanager
def serve(turns: int, pause: float = 0.0, rows: list[dict] | None = None) -> Iterator[str]:
    """The scripted model on 127.0.0.1 (the smoke tasks', or `rows`' script): yields its base URL."""
    from sandbatch.testing.scripted_model import Script, ScriptedModel

    server = ScriptedModel(Script.from_dict(script(turns, pause, rows))).serve()
    try:
        yield f"http://127.0.0.1:{server.port}/v1"
    finally:
        server.stop()


def mini_harness(url: str) -> tuple[dict, dict]:
    """(harness, model) config sections of a host-mode mini-swe-agent run against `url`."""
    return ({"name": "mini-swe-agent", "config": {"mode": "host", "step_limit": 50}},
            {"name": "scripted", "base_url": url})
