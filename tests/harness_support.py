"""Running the real workflow on the local provider from harness tests, and reading its results."""

from __future__ import annotations

import contextlib

import json
import stat
import time
from pathlib import Path
from typing import Any

from workflow_util import SMOKE_TASKS, snakemake, write_config


def smoke_config(tmp: Path, harness: dict[str, Any], instance_ids: list[str], **extra: Any) -> dict[str, Any]:
    """A run of the bundled smoke tasks with `harness` on the local provider, rooted in `tmp`."""
    cfg = {
        "run": "t",
        "benchmark": {"kind": "smoke", "tasks": str(SMOKE_TASKS), "instance_ids": instance_ids},
        "harness": harness,
        "sandbox": {"provider": "local", "local": {"root": str(tmp / "sandboxes")}},
        "retries": 0,
    }
    for key, value in extra.items():
        cfg[key] = {**cfg.get(key, {}), **value} if isinstance(value, dict) else value
    return cfg


def run_workflow(tmp: Path, config: dict[str, Any], timeout: float = 1200,
                 graded_nothing: bool = False) -> tuple[Path, float]:
    """The real workflow on `config` in `tmp`; (its run directory, seconds it took).
    graded_nothing: every rollout is expected to end in an infrastructure error, which fails
    the run (exit 1, after its report) with one line saying so."""
    t0 = time.monotonic()
    proc = snakemake(tmp, "--configfile", str(write_config(tmp, "config.yaml", config)), "--keep-going",
                     timeout=timeout)
    took = time.monotonic() - t0
    expected = 1 if graded_nothing else 0
    assert proc.returncode == expected, (f"snakemake exited {proc.returncode}:\n{proc.stdout[-4000:]}\n"
                                         f"{proc.stderr[-8000:]}")
    assert ("graded nothing" in proc.stderr) == graded_nothing, proc.stderr[-3000:]
    return tmp / "results" / config.get("run", "default"), took


def run_context(harness_name: str, tmp: Path, config: dict[str, Any] | None = None, *,
                model_url: str | None = "http://127.0.0.1:1234/v1", api_key: str | None = "k",
                model_name: str = "m-1", agent_timeout: float = 60) -> Any:
    """A RunContext as the harness step builds it (merged harness config, schema defaults)."""
    from sandbatch.core.config import parse
    from sandbatch.harness import RunContext, get_harness

    cfg = parse({"model": {"name": model_name}, "timeouts": {"agent": agent_timeout}})
    return RunContext(task=None, prompt="fix it", options=get_harness(harness_name).options_of(config or {}),
                      version=None, model=cfg.model, model_url=model_url, api_key=api_key,
                      timeouts=cfg.timeouts, rollout_dir=tmp)


def convert_events(harness_name: str, events: list[Any]) -> Any:
    """The Conversion of `events` by the harness with its default config."""
    from sandbatch.harness import get_harness

    harness = get_harness(harness_name)
    return harness.convert(events, harness.options_of({}))


def recorded_events(path: Path) -> list[dict[str, Any]]:
    """A recorded events.jsonl."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def rollout(run_dir: Path, task: str, name: str, repeat: int = 0) -> Any:
    path = run_dir / task / str(repeat) / name
    if name.endswith(".json"):
        return json.loads(path.read_text(encoding="utf-8"))
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return path.read_text(encoding="utf-8")


def items_of(response: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [item for item in response["output"] if item["type"] == kind]


def codex_npm_prefix() -> Path:
    """An npm prefix holding the real Codex (npm's @openai/codex at the harness's version),
    installed once per machine (shared.machine_dir)."""
    import subprocess

    from sandbatch.harness.codex import CodexHarness
    from services import need_program
    from shared import built_once, machine_dir

    npm = need_program("npm", "run scripts/services/node.sh (as root)")
    version = CodexHarness.default_version
    prefix = machine_dir(f"codex-{version}")
    with built_once(f"codex-{version}", bound=600):  # npm's timeout
        if not (prefix / "bin" / "codex").exists():
            proc = subprocess.run([npm, "install", "-g", "--no-audit", "--no-fund", "--prefix", str(prefix),
                                   f"@openai/codex@{version}"], capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, f"npm install @openai/codex@{version}: {proc.stderr[-1500:]}"
    return prefix


def leftover_sandboxes(tmp: Path) -> list[str]:
    root = tmp / "sandboxes"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def sleeper(path: Path) -> Path:
    """A stand-in `opencode` that prints one event and then hangs (answers --version)."""
    path.write_text("#!/bin/sh\necho '{\"type\":\"step_start\",\"part\":{}}'\n"
                    "[ \"$1\" = --version ] && exit 0\nexec sleep 300\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@contextlib.contextmanager
def scripted_model_server(script: dict[str, Any]):
    """The scripted model serving `script` on 127.0.0.1: yields (base URL, the model app)."""
    from sandbatch.testing.scripted_model import Script, ScriptedModel

    app = ScriptedModel(Script.from_dict(script))
    server = app.serve()
    try:
        yield f"http://127.0.0.1:{server.port}/v1", app
    finally:
        server.stop()


@contextlib.contextmanager
def listed_model(name: str = "m"):
    """A real endpoint whose /models lists `name` (a run's start asks it there), for runs whose
    agents never call their model: yields its base URL."""
    with scripted_model_server({"models": [name]}) as (url, _):
        yield url


# --- a scripted conversation that fixes two smoke tasks -----------------------------------

def fix_turns(check: str, edit: str) -> list[dict]:
    """Look, edit through the bash tool, then run the tests: what the agent does on each task."""
    return [
        {"reasoning_content": "Find the code first.", "content": "Looking at the code.",
         "tool_calls": [{"name": "bash", "arguments": {"command": check, "description": "Show the code"}}]},
        {"content": "Applying the fix.",
         "tool_calls": [{"name": "bash", "arguments": {"command": edit, "description": "Edit the file"}}]},
    ]


CALC_EDIT = "python3 - <<'EOF'\nimport pathlib\np = pathlib.Path('calc.py')\np.write_text(p.read_text().replace('a // b', 'a / b'))\nEOF"
SLUG_EDIT = ("git apply <<'EOF'\n"
             "--- a/textutils/slug.py\n+++ b/textutils/slug.py\n@@ -10,4 +10,4 @@ def slugify(text):\n"
             "     'release-notes'\n     \"\"\"\n     text = text.lower()\n"
             "-    return re.sub(r\"[^a-z0-9]\", \"-\", text)\n"
             "+    return re.sub(r\"[^a-z0-9]+\", \"-\", text).strip(\"-\")\n"
             "EOF\ngit diff --stat")

# the scripted model's side of a real OpenCode run on the smoke tasks calc-1 and textutils-1
OPENCODE_SCRIPT = {
    "tasks": {
        "divide() truncates": {"turns": fix_turns("grep -n 'def divide' -A 2 calc.py", CALC_EDIT),
                               "final": {"content": "divide() now returns the true quotient."}},
        "slugify() leaves": {"turns": fix_turns("cat textutils/slug.py", SLUG_EDIT),
                             "final": {"content": "Slugs no longer have repeated or edge dashes."}},
    },
    "final": {"content": "Nothing to do."},
}


# --- token data (model.tokens: on) against the scripted model ----------------------------------

def assert_token_data(run_dir: Path, tasks: list[str], model: Any, drifted: dict[str, int] | None = None) -> None:
    """Each rollout's assistant items, turn by turn, are what one upstream reply produced, and
    the turn's last item carries the prompt ids, generated ids and logprobs that reply was
    sent with, id for id; so do the trajectory's step metrics. `drifted`: turns per task whose
    prompt does not extend the previous turn's (default none)."""
    from sandbatch.testing.template import logprob

    replies = [model.reply(r["body"]) for r in model.requests
               if r["method"] == "POST" and r["path"].endswith(("/chat/completions", "/responses"))]
    by_prompt = {tuple(r.prompt_ids): r for r in replies}
    resps = []
    for task in tasks:
        resp = rollout(run_dir, task, "response.json")
        resps.append(resp)
        join = resp["sandbatch"]["token_join"]
        assert join["unmatched_items"] == 0 and join["matched_items"] == join["items"] > 0, join
        assert join["drifted_turns"] == (drifted or {}).get(task, 0), join
        group, carrying = [], []
        for item in resp["output"]:
            if item["type"] not in ("message", "reasoning", "function_call"):
                continue
            group.append(item)
            if "segment" not in item:  # on each turn's last item
                continue
            if "prompt_token_ids" not in item:  # an untrusted turn: its ids left off
                assert item["trusted"] is False, item
                group = []
                continue
            reply = by_prompt[tuple(item["prompt_token_ids"])]  # the upstream turn with exactly this prompt
            generated = [i for _, i in reply.generated()]
            assert item["generation_token_ids"] == generated
            assert item["generation_log_probs"] == [logprob(i) for i in generated]
            produced = ([("reasoning", reply.reasoning)] if reply.reasoning else []) + \
                ([("message", reply.content)] if reply.content else []) + \
                [("function_call", name, json.loads(args)) for _, name, args in reply.calls]
            got = [("function_call", i["name"], json.loads(i["arguments"])) if i["type"] == "function_call"
                   else (i["type"], _item_text(i)) for i in group]
            assert sorted(map(repr, got)) == sorted(map(repr, produced)), (got, produced)
            carrying.append(item)
            group = []
        assert not group, f"{task}: items after the last turn with token data: {group}"
        assert len(carrying) == join["turns_with_tokens"] == join["matched_calls"] - join["untrusted_turns"]
        assert join["untrusted_turns"] == join["drifted_turns"], join  # the only untrusted turns here
        assert_segments_chain(carrying)
        steps = rollout(run_dir, task, "trajectory.json")["steps"]
        metrics = [s["metrics"] for s in steps if "completion_token_ids" in s.get("metrics", {})]
        assert metrics, f"{task}: no ATIF step carries token ids"
        for m in metrics:
            item = next(i for i in carrying if i["prompt_token_ids"] == m["prompt_token_ids"])
            assert (m["completion_token_ids"], m["logprobs"]) == (item["generation_token_ids"],
                                                                  item["generation_log_probs"])
    assert_gym_training_items(resps)


def assert_segments_chain(carrying: list[dict[str, Any]]) -> None:
    """Within a segment, each turn's prompt extends the previous turn's prompt + generation."""
    for before, after in zip(carrying, carrying[1:]):
        head = before["prompt_token_ids"] + before["generation_token_ids"]
        if before["segment"] == after["segment"]:
            assert after["prompt_token_ids"][:len(head)] == head, after["segment"]


_GYM_TRAINING = """
import json, sys
from nemo_gym.openai_utils import NeMoGymResponse, TokenIDLogProbMixin
out = []
for resp in json.load(sys.stdin):
    parsed = NeMoGymResponse.model_validate(resp)
    out.append([[type(i).__name__, i.prompt_token_ids, i.generation_token_ids, i.generation_log_probs]
                for i in parsed.output if isinstance(i, TokenIDLogProbMixin)])
print(json.dumps(out))
"""
_GYM_CLASSES = {"message": "NeMoGymResponseOutputMessageForTraining",
                "function_call": "NeMoGymResponseFunctionToolCallForTraining",
                "reasoning": "NeMoGymResponseReasoningItemForTraining"}


def assert_gym_training_items(resps: list[dict[str, Any]]) -> None:
    """Each response validates as NeMo Gym 0.4.0's `NeMoGymResponse`, and exactly its items
    with token data parse as Gym's training items, fields unchanged."""
    import gym_env

    parsed = gym_env.run(_GYM_TRAINING, resps)
    assert parsed == [[[_GYM_CLASSES[i["type"]], i["prompt_token_ids"], i["generation_token_ids"],
                        i["generation_log_probs"]] for i in r["output"] if "prompt_token_ids" in i] for r in resps]
    assert all(parsed)


def _item_text(item: dict[str, Any]) -> str:
    from sandbatch.rollout.responses import item_text

    return item_text(item).strip()
