"""The pool harness: agent config, install checks, event conversion, and whole runs.

The real pool binary cannot be downloaded here, so the runs use tests/fixtures/pool_standin
(uploaded with `install.method: upload`), which parses pool's flags, prints a recorded
event stream, edits the repository, and dumps what it received.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gym_env import assert_valid_responses
from harness_support import (CALC_EDIT, SLUG_EDIT, assert_token_data, items_of, leftover_sandboxes, listed_model,
                             rollout, run_context, run_workflow, scripted_model_server, smoke_config)
from sandbatch.core.errors import UserError
from sandbatch.harness import get_harness
from sandbatch.harness.pool import AGENT_DEFAULT
from workflow_util import snakemake, write_config

STANDIN = Path(__file__).parent / "fixtures" / "pool_standin"

# a stream with every record shape pool prints, plus what a converter must survive
FULL_STREAM = [
    {"type": "reasoning", "reasoning": "The quotient is truncated by //."},
    {"type": "thought", "thought": "The quotient is truncated by //."},
    {"type": "assistantMessage", "message": "  \n "},
    {"type": "assistantMessage", "message": "Fixing divide()."},
    {"type": "toolCall", "name": "shell", "args": {"cmd": "grep -n '//' calc.py"}},
    {"type": "toolCallResult", "result": "14:    return a // b"},
    {"type": "toolCall", "name": "edit", "args": {"path": "calc.py", "old": "a // b", "new": "a / b"}},
    {"type": "toolCall", "name": "read", "args": {"path": "missing.py"}},
    {"type": "toolCallResult", "result": {"ok": True}},
    {"type": "toolCallResult", "err": "open missing.py: no such file"},
    {"type": "toolCall", "name": "shell_list", "args": {}},
    {"type": "toolCallResult", "entries": ["shell-1 running", "shell-2 done"]},
    {"error": "403 Forbidden: quota exceeded"},
    {"type": "error", "message": "stream reset"},
    {"type": "oauth_url", "url": "https://example.invalid/login"},
    {"type": "mysteryRecord", "payload": 7},
    "pool: a line that is not JSON",
    {"type": "toolCall", "name": "exit", "args": {"success": True}},
]


def convert(events, **config):
    harness = get_harness("pool")
    return harness.convert(events, harness.options_of(config))


def test_convert_pairs_results_fifo_and_keeps_what_it_does_not_know():
    from sandbatch.harness._process import json_events

    stdout = "\n".join(e if isinstance(e, str) else json.dumps(e) for e in FULL_STREAM) + "\n"
    conv = convert(json_events(stdout))
    shape = [(i["type"], i.get("call_id"), i.get("name")) for i in conv.items]
    assert shape == [
        ("reasoning", None, None),
        ("message", None, None),
        ("function_call", "call_0", "shell"),
        ("function_call_output", "call_0", None),
        ("function_call", "call_1", "edit"),
        ("function_call", "call_2", "read"),
        ("function_call_output", "call_1", None),
        ("function_call_output", "call_2", None),
        ("function_call", "call_3", "shell_list"),
        ("function_call_output", "call_3", None),
        ("function_call", "call_4", "exit"),
        ("function_call_output", "call_4", None),
    ]
    outputs = {i["call_id"]: i["output"] for i in conv.items if i["type"] == "function_call_output"}
    assert outputs == {"call_0": "14:    return a // b", "call_1": '{"ok": true}',
                       "call_2": "[error] open missing.py: no such file", "call_3": "shell-1 running\nshell-2 done",
                       "call_4": ""}
    assert json.loads(conv.items[4]["arguments"]) == {"path": "calc.py", "old": "a // b", "new": "a / b"}
    assert conv.items[0]["summary"][0]["text"] == "The quotient is truncated by //."
    assert conv.items[1]["content"][0]["text"] == "Fixing divide()."
    assert conv.metadata["errors"] == [{"error": "403 Forbidden: quota exceeded"},
                                       {"type": "error", "message": "stream reset"}]
    assert conv.unknown == 2
    assert conv.metadata["unknown_types"] == {"mysteryRecord": 1, "sandbatch.text": 1}
    assert {"type": "mysteryRecord", "payload": 7} in conv.metadata["unknown_records"]
    assert conv.metadata["unanswered_calls"] == 1 and conv.metadata["failed_tool_results"] == 1
    assert conv.metadata["skipped"] == {"thought": 1, "oauth_url": 1, "blank_message": 1}


def test_inline_think_folds_reasoning_into_the_next_message():
    from sandbatch.rollout import responses

    items = responses.inline_think(convert(FULL_STREAM[:4]).items)
    assert [i["type"] for i in items] == ["message"]
    assert items[0]["content"][0]["text"] == "<think>\nThe quotient is truncated by //.\n</think>\n\nFixing divide()."


def test_convert_unanswered_call_in_the_middle_gets_its_empty_output_right_after_it():
    conv = convert([
        {"type": "toolCall", "name": "shell", "args": {"cmd": "sleep 1000"}},
        {"type": "toolCall", "name": "shell_kill", "args": {"id": 1}},
        {"type": "toolCallResult", "result": "killed"},
        {"type": "assistantMessage", "message": "Stopped."},
    ])
    # FIFO: the one result goes to the oldest call; the second call is left without one
    assert [(i["type"], i.get("call_id"), i.get("output")) for i in conv.items] == [
        ("function_call", "call_0", None), ("function_call", "call_1", None),
        ("function_call_output", "call_1", ""), ("function_call_output", "call_0", "killed"),
        ("message", None, None)]


def test_convert_result_without_call_and_garbage_never_raise():
    conv = convert([{"type": "toolCallResult", "result": "orphan"}, {}, {"type": None}, {"type": 5}, [1], "x"])
    # the result keeps its text under a call id of its own, and is counted
    assert [(i["type"], i["call_id"], i["output"]) for i in conv.items] == [("function_call_output", "orphan_0", "orphan")]
    assert conv.metadata["orphan_results"] == 1 and conv.unknown == 5


def test_convert_failed_results_unnamed_calls_and_text_arguments():
    conv = convert([
        {"type": "toolCall", "args": "ls -la"},  # no name, arguments that are not JSON
        {"type": "toolCallResult", "result": "partial listing", "err": "exit status 2"},
        {"type": "toolCall", "name": "", "args": '{"cmd": "pwd"}'},
        {"type": "toolCallResult", "err": {"code": 1}},
        {"type": "toolCall", "name": "read"},
    ])
    calls, outputs = [i for i in conv.items if i["type"] == "function_call"], [
        i for i in conv.items if i["type"] == "function_call_output"]
    assert [c["name"] for c in calls] == ["tool", "tool", "read"]
    assert [json.loads(c["arguments"]) for c in calls] == ["ls -la", {"cmd": "pwd"}, {}]
    # failed: marked, and both the error and the result are kept
    assert [o["output"] for o in outputs] == ["[error] exit status 2\npartial listing", '[error] {"code": 1}', ""]
    assert conv.metadata["failed_tool_results"] == 2


def test_inline_think_keeps_reasoning_after_the_last_message():
    from sandbatch.rollout import responses

    items = responses.inline_think(convert([
        {"type": "reasoning", "reasoning": "first"}, {"type": "assistantMessage", "message": "Hi."},
        {"type": "reasoning", "reasoning": "trailing thought"}]).items)
    assert [i["type"] for i in items] == ["message", "reasoning"]
    assert items[1]["summary"][0]["text"] == "trailing thought"


def ctx(tmp_path, config=None, **kw):
    return run_context("pool", tmp_path, config, **kw)


def test_agent_config_is_the_whole_default_with_the_run_filled_in(tmp_path):
    cfg = get_harness("pool").agent_config(ctx(tmp_path, {"max_context_window": 1000}))
    assert cfg["model"]["provider"]["openai"] == {"base_url": "http://127.0.0.1:1234/v1", "api_key": "k",
                                                  "model_id": "m-1", "use_streaming": False}
    assert cfg["memory"]["compact"] == {"TriggerCompressionTokenCount": 800, "MaxSummarizeTokenCount": 700,
                                        "MinRetainedSteps": 5}
    for key in ("max_steps", "http_timeout", "enabled_tools", "tools", "parallel_tool_calls",
                "enable_tool_call_loop_detection", "enable_no_tool_call_retry"):
        assert cfg[key] == AGENT_DEFAULT[key]
    assert cfg["model"]["exit_tool_on_stop"] is True and cfg["model"]["prompt"] == {"hidden_tool_names": ["exit"]}


def test_agent_config_user_overrides_deep_merge_and_win(tmp_path):
    user = {"max_context_window": 200000, "agent_config": {
        "model": {"max_completion_retries": 5, "provider": {"openai": {"use_streaming": True}}},
        "memory": {"compact": {"MaxSummarizeTokenCount": 1234}},
        "enabled_tools": ["read", "exit"], "http_timeout": "55m"}}
    cfg = get_harness("pool").agent_config(ctx(tmp_path, user))
    assert cfg["model"]["max_completion_retries"] == 5
    assert cfg["model"]["max_completion_retries_transient"] == 3  # sibling kept
    assert cfg["model"]["provider"]["openai"]["use_streaming"] is True
    assert cfg["model"]["provider"]["openai"]["model_id"] == "m-1"
    assert cfg["memory"]["compact"] == {"TriggerCompressionTokenCount": 160000, "MaxSummarizeTokenCount": 1234,
                                        "MinRetainedSteps": 5}
    assert cfg["enabled_tools"] == ["read", "exit"] and cfg["http_timeout"] == "55m"
    assert AGENT_DEFAULT["model"]["provider"]["openai"]["base_url"] is None  # the default is not mutated


def test_agent_config_needs_a_model_url(tmp_path):
    with pytest.raises(UserError, match="model.base_url"):
        get_harness("pool").agent_config(ctx(tmp_path, model_url=None))


@pytest.mark.parametrize("install, message", [
    ({}, "harness.config.install.accept_eula"),
    ({"accept_eula": "yes"}, "harness.config.install.accept_eula"),
    ({"method": "upload"}, "harness.config.install.source"),
    ({"method": "upload", "source": "/nonexistent/pool"}, "does not exist"),
    ({"method": "path"}, "harness.config.install.path"),
    ({"method": "brew"}, "harness.config.install.method"),
    ({"method": "path", "path": "pool", "sorce": "/x"}, "harness.config.install: unknown key 'sorce'"),
])
def test_install_config_errors_are_one_line_user_errors(install, message):
    harness = get_harness("pool")
    with pytest.raises(UserError, match=message) as err:
        harness.check_config(harness.options_of({"install": install}))
    assert "\n" not in str(err.value)


def test_missing_eula_stops_the_workflow_before_any_job(tmp_path):
    cfg = write_config(tmp_path, "c.yaml", smoke_config(tmp_path, {"name": "pool"}, ["smoke__calc-1"]))
    proc = snakemake(tmp_path, "--configfile", str(cfg), "-n", timeout=120)
    assert proc.returncode != 0
    assert "harness.config.install.accept_eula" in proc.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_pool_runs_through_the_workflow(tmp_path):
    """Four tasks, four endings: fixed (exit 0), gave up (exit 4), failed (exit 1), hung (timeout)."""
    scenarios = [
        {"match": "divide() truncates", "events": FULL_STREAM, "exit": 0,
         "edit": {"path": "calc.py", "old": "a // b", "new": "a / b"}},
        {"match": "slugify()", "events": [{"type": "assistantMessage", "message": "I cannot finish this."}],
         "exit": 4},
        {"match": "parse_duration()", "events": [{"error": "500 upstream"}], "exit": 1,
         "edit": {"path": "notes.txt", "content": "half done\n"}},
        {"match": "LRUCache", "events": [{"type": "reasoning", "reasoning": "thinking forever"}], "sleep": 120},
    ]
    (tmp_path / "scenarios.json").write_text(json.dumps(scenarios))
    dumps = tmp_path / "dumps"
    harness = {"name": "pool", "config": {
        "install": {"method": "upload", "source": str(STANDIN)},
        "max_context_window": 64000,
        "agent_config": {"model": {"max_completion_retries": 7}, "tools": {"shell": {"foreground_timeout": "30s"}}},
        "env": {"STANDIN_SCENARIOS": str(tmp_path / "scenarios.json"), "STANDIN_DUMP_DIR": str(dumps)}}}
    tasks = ["smoke__calc-1", "smoke__textutils-1", "smoke__duration-1", "smoke__lrucache-1"]
    with listed_model("pool-model") as url:  # the stand-in never calls it
        cfg = smoke_config(tmp_path, harness, tasks, model={"name": "pool-model", "base_url": url},
                           timeouts={"agent": 8})
        run_dir, took = run_workflow(tmp_path, cfg)

    # fixed: converted items, status ok, graded 1.0
    h = rollout(run_dir, "smoke__calc-1", "harness.json")
    assert (h["status"], h["exit_code"], h["timed_out"]) == ("ok", 0, False)
    resp = rollout(run_dir, "smoke__calc-1", "response.json")
    assert [i["name"] for i in items_of(resp, "function_call")] == ["shell", "edit", "read", "shell_list", "exit"]
    assert len(items_of(resp, "function_call_output")) == 5
    assert resp["sandbatch"]["unknown_events"] == 2 and len(resp["sandbatch"]["errors"]) == 2
    assert rollout(run_dir, "smoke__calc-1", "grade.json")["reward"] == 1.0
    events = rollout(run_dir, "smoke__calc-1", "events.jsonl")
    assert events[0] == FULL_STREAM[0] and len(events) == len(FULL_STREAM)

    # gave up: exit 4 is a normal, graded rollout
    h = rollout(run_dir, "smoke__textutils-1", "harness.json")
    assert (h["status"], h["exit_code"], h["metadata"]) == ("ok", 4, {"gave_up": True})
    assert rollout(run_dir, "smoke__textutils-1", "grade.json")["reward"] == 0.0

    # failed: agent_error, its edit still becomes the patch
    h = rollout(run_dir, "smoke__duration-1", "harness.json")
    assert (h["status"], h["failure_class"], h["exit_code"]) == ("agent_error", "agent_exit", 1)
    assert rollout(run_dir, "smoke__duration-1", "response.json")["sandbatch"]["errors"] == [{"error": "500 upstream"}]
    assert "notes.txt" in rollout(run_dir, "smoke__duration-1", "patch.json")["files"]

    # hung: killed at the timeout, recorded as timeout, what it printed kept
    h = rollout(run_dir, "smoke__lrucache-1", "harness.json")
    assert (h["status"], h["failure_class"], h["timed_out"], h["exit_code"]) == ("timeout", "agent_timeout", True, None)
    assert 7 < h["agent_s"] < 30
    assert rollout(run_dir, "smoke__lrucache-1", "events.jsonl") == scenarios[3]["events"]
    assert rollout(run_dir, "smoke__lrucache-1", "response.json")["status"] == "incomplete"
    assert_valid_responses([rollout(run_dir, task, "response.json") for task in tasks])  # fixed, failed, timed out

    # what pool received: flags, the whole config, state dirs under the sandbox tmpdir
    received = [json.loads(p.read_text()) for p in dumps.glob("*.json")]
    assert len(received) == 4
    for got in received:
        assert got["argv"][1:6] == ["exec", "-o", "json", "--sandbox", "disabled"]
        assert "--unsafe-auto-allow" in got["argv"]
        cfg_ = got["config"]
        openai = cfg_["model"]["provider"]["openai"]
        # pool talks to its rollout's proxy (never straight to the model) with the proxy's own key
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", openai["base_url"]) and ":9/" not in openai["base_url"]
        assert openai["api_key"].startswith("sbx-")
        assert (openai["model_id"], openai["use_streaming"]) == ("pool-model", False)
        assert cfg_["model"]["max_completion_retries"] == 7 and cfg_["model"]["exit_tool_on_stop"] is True
        assert cfg_["tools"]["shell"] == {"foreground_timeout": "30s"}
        assert cfg_["tools"]["read"] == AGENT_DEFAULT["tools"]["read"]
        assert cfg_["enabled_tools"] == AGENT_DEFAULT["enabled_tools"]
        assert cfg_["memory"]["compact"]["TriggerCompressionTokenCount"] == 51200
        assert cfg_["memory"]["compact"]["MaxSummarizeTokenCount"] == 44800
        sandbox_root = Path(got["cwd"]).parent
        assert Path(got["cwd"]).name == "work"
        env = got["env"]
        assert env["POOLSIDE_API_KEY"]
        for key in ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
            assert Path(env[key]).is_relative_to(sandbox_root / "tmp"), (key, env[key])
    prompts = sorted(got["prompt"].splitlines()[0] for got in received)
    assert prompts[0].startswith("LRUCache evicts")

    # pool's state (under XDG_STATE_HOME) is not part of any patch; no sandbox is left
    for task in tasks:
        assert not any("last-run.log" in f for f in rollout(run_dir, task, "patch.json")["files"])
    assert leftover_sandboxes(tmp_path) == []
    print(f"pool stand-in workflow, 4 tasks: {took:.1f} s")


# the scripted model's side of the stand-in's agent loop (a `shell` tool; no tool call ends it)
POOL_SCRIPT = {
    "tasks": {
        "divide() truncates": {"turns": [
            {"content": "Looking.", "tool_calls": [{"name": "bash", "arguments": {"command": "grep -n '//' calc.py"}}]},
            {"content": "Fixing.", "tool_calls": [{"name": "bash", "arguments": {"command": CALC_EDIT}}]},
        ], "final": {"content": "Fixed divide()."}},
        # reasoning on the first turn, which the stand-in leaves out of the history it sends back
        "slugify() leaves": {"turns": [
            {"reasoning_content": "Read it first.", "content": "Reading.",
             "tool_calls": [{"name": "bash", "arguments": {"command": "cat textutils/slug.py"}}]},
            {"content": "Fixing.", "tool_calls": [{"name": "bash", "arguments": {"command": SLUG_EDIT}}]},
        ], "final": {"content": "Fixed slugify()."}},
    },
    "fallbacks": {"bash": [{"name": "shell", "rename": {"command": "cmd"}}]},
}


@pytest.mark.slow
@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "streamed"])
def test_pool_rollouts_carry_the_upstreams_token_ids_and_show_drift(tmp_path, streaming):
    """model.tokens: on, the stand-in's own agent loop: three turns per task, ids joined to items."""
    tasks = ["smoke__calc-1", "smoke__textutils-1"]
    openai = {"use_streaming": streaming}
    harness = {"name": "pool", "config": {"install": {"method": "upload", "source": str(STANDIN)},
                                          "max_context_window": 64000,
                                          "agent_config": {"model": {"provider": {"openai": openai}}}}}
    with scripted_model_server(POOL_SCRIPT) as (url, model):
        cfg = smoke_config(tmp_path, harness, tasks, model={"name": "scripted", "base_url": url, "tokens": "on"},
                           timeouts={"agent": 120}, aggregate={"exports": [] if streaming else ["gym"]})
        run_dir, _ = run_workflow(tmp_path, cfg)
    assert {r["body"]["stream"] for r in model.requests if r["method"] == "POST"} == {streaming}
    for task in tasks:
        assert rollout(run_dir, task, "grade.json")["reward"] == 1.0
        assert len(items_of(rollout(run_dir, task, "response.json"), "function_call")) == 2
    # textutils' second prompt lacks the first turn's reasoning: the one drifted turn of the run
    assert_token_data(run_dir, tasks, model, drifted={"smoke__textutils-1": 1})
    drift = json.loads((run_dir / "metrics.json").read_text())["token_data"]
    # the drifted turn is untrusted (its ids left off) and starts textutils' second segment
    assert (drift["turns_with_tokens"], drift["continuing_turns"], drift["drifted_turns"]) == (5, 4, 1)
    assert (drift["segments"], drift["untrusted_turns"], drift["rewritten_turns"]) == (3, 1, 0)
    assert drift["drift_rate"]["value"] == 0.25
    assert "re-tokenisation drift (turns not extending the previous turn) | 25.0% (1/4)" in \
        (run_dir / "report.md").read_text()
    page = (run_dir / "report" / "view" / "rollouts" / "smoke__textutils-1" / "0.html").read_text()
    assert "<td>drifted turns</td><td>1 of 2</td>" in page
    assert "<td>segments / untrusted turns</td><td>2 / 1</td>" in page
    if not streaming:
        assert_gym_samples_per_segment(run_dir)


def assert_gym_samples_per_segment(run_dir):
    """The gym export's training samples: textutils' two segments (its drifted turn starts the
    second) are two samples, each a chain NeMo Gym's items read in order; its one rollouts.jsonl
    row, holding both segments' ids, is not."""
    from gym_env import training_chains

    def rows(name):
        return [json.loads(line) for line in (run_dir / "gym" / name).read_text().splitlines()]

    samples, rollouts = rows("rollouts_training.jsonl"), rows("rollouts.jsonl")
    assert sorted((r["instance_id"], r["_sandbatch_segment"], r["reward"]) for r in samples) == \
        [("smoke__calc-1", 0, 1.0), ("smoke__textutils-1", 0, 1.0), ("smoke__textutils-1", 1, 1.0)]
    assert all(len(r["response"]["output"]) == len(next(o for o in rollouts if o["instance_id"] == r["instance_id"])
                                                    ["response"]["output"]) for r in samples)  # every item kept
    # one run of Gym's interpreter for both files
    chains = training_chains([r["response"] for r in samples + rollouts])
    chains, whole = chains[:len(samples)], dict(zip([r["instance_id"] for r in rollouts], chains[len(samples):]))
    # calc's three turns; textutils' first, then its last (the drifted one between carries no ids)
    assert [n for n, _ in chains] == [3 if r["instance_id"] == "smoke__calc-1" else 1 for r in samples] and \
        all(ok for _, ok in chains), chains
    assert whole == {"smoke__calc-1": (3, True), "smoke__textutils-1": (2, False)}, whole


# --- max_context_window: set, or the endpoint's max_model_len, or a plan-time error ----------

def test_context_window_comes_from_the_endpoint_or_stops_the_run(tmp_path):
    from harness_support import scripted_model_server
    from sandbatch.core.config import parse

    harness = get_harness("pool")
    merged = harness.options_of({})
    assert merged.max_context_window is None  # no silent 131072
    with scripted_model_server({"models": ["big"], "max_model_len": 200000}) as (url, _):
        model = parse({"model": {"name": "big", "base_url": url}}).model
        harness.check_model(merged, model)  # reported: fine
        from sandbatch.proxy.served import served_context_window
        assert served_context_window(model) == (200000, "")
        cfg = harness.agent_config(ctx(tmp_path, model_url=url), served_context_window(model)[0])
        assert cfg["memory"]["compact"]["TriggerCompressionTokenCount"] == 160000
    with scripted_model_server({"models": ["big"], "max_model_len": None}) as (url, _):
        model = parse({"model": {"name": "big", "base_url": url}}).model
        with pytest.raises(UserError, match=r"^harness.config.max_context_window: not set, and .*/models reports "
                                            r"no max_model_len for model 'big'") as err:
            harness.check_model(merged, model)
        assert "\n" not in str(err.value)
        harness.check_model(harness.options_of({"max_context_window": 4096}), model)  # set: not asked


def test_unreported_context_window_stops_the_workflow_before_any_job(tmp_path):
    from harness_support import scripted_model_server

    with scripted_model_server({"max_model_len": None}) as (url, model):
        cfg = write_config(tmp_path, "c.yaml", smoke_config(
            tmp_path, {"name": "pool", "config": {"install": {"method": "path", "path": "pool"}}},
            ["smoke__calc-1"], model={"name": "scripted", "base_url": url}))
        proc = snakemake(tmp_path, "--configfile", str(cfg), timeout=120)
    assert proc.returncode != 0
    assert "harness.config.max_context_window: not set" in proc.stderr
    assert [r["path"] for r in model.requests] == ["/v1/models"]
    assert not (tmp_path / "results").exists()
