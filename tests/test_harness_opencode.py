"""The opencode harness: generated config, event conversion, and real OpenCode runs.

The end-to-end test installs OpenCode from npm inside each sandbox, as a user would, and
drives it with the scripted model through the real workflow (needs node/npm and the npm
registry, as CI has).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from services import need_program
from gym_env import assert_valid_responses
from harness_support import (CALC_EDIT, OPENCODE_SCRIPT as SCRIPT, assert_token_data, convert_events, items_of,
                             leftover_sandboxes, listed_model, recorded_events, rollout, run_context, run_workflow,
                             scripted_model_server, sleeper, smoke_config)
from sandbatch.core.errors import UserError
from sandbatch.harness import get_harness
from sandbatch.harness.opencode import DEFAULT_PERMISSION

FIXTURES = Path(__file__).parent / "fixtures"
RECORDED = FIXTURES / "opencode_1.18.33_events.jsonl"  # a real run: ls, a denied `git log`, "Done."


def convert(events):
    return convert_events("opencode", events)


def recorded():
    return recorded_events(RECORDED)


def test_convert_a_recorded_run():
    conv = convert(recorded())
    shape = [(i["type"], i.get("call_id"), i.get("name")) for i in conv.items]
    # the second step's text started before its tool call, though it was printed after it
    assert shape == [("reasoning", None, None), ("message", None, None),
                     ("function_call", "call_0_0", "bash"), ("function_call_output", "call_0_0", None),
                     ("message", None, None),
                     ("function_call", "call_1_0", "bash"), ("function_call_output", "call_1_0", None),
                     ("message", None, None)]
    assert json.loads(conv.items[2]["arguments"]) == {"command": "ls", "description": "list files"}
    assert conv.items[3]["output"] == "README.md\ncalc.py\npyproject.toml\ntests\n"
    assert "prevents you from using this specific tool call" in conv.items[6]["output"]  # state.error
    assert conv.unknown == 0
    assert conv.metadata["opencode_usage"] == {"input": 2446 + 2538 + 2695, "output": 18 + 26 + 2, "reasoning": 7,
                                               "cache_read": 0, "cache_write": 0, "cost": 0.0, "steps": 3}
    assert conv.metadata["session_ids"] == [recorded()[0]["sessionID"]]


def test_convert_errors_unknown_and_repeated_calls():
    error = {"type": "error", "timestamp": 1, "sessionID": "s",
             "error": {"name": "APIError", "data": {"message": "Connection refused"}}}
    tool = {"type": "tool_use", "part": {"tool": "read", "callID": "c1",
                                         "state": {"status": "running", "input": {"filePath": "a.py"}}}}
    done = {"type": "tool_use", "part": {"tool": "read", "callID": "c1",
                                         "state": {"status": "completed", "input": {"filePath": "a.py"},
                                                   "output": "print(1)"}}}
    conv = convert([tool, done, {"type": "text", "part": {"text": "   "}}, error,
                    {"type": "permission_asked", "part": {}}, {"type": "sandbatch.text", "text": "warn"},
                    {"type": "tool_use", "part": {}}, ["junk"]])
    assert [(i["type"], i.get("output")) for i in conv.items] == [("function_call", None),
                                                                 ("function_call_output", "print(1)")]
    assert conv.metadata["errors"] == [error["error"]]
    assert conv.unknown == 4 and conv.metadata["unknown_types"] == {"permission_asked": 1, "sandbatch.text": 1,
                                                                    "tool_use": 1, "list": 1}


def test_convert_keeps_opencodes_own_message_after_a_compaction_as_feedback():
    # the events of a real compaction (1.18.33): the summary, OpenCode's synthetic request to go on, the next turn
    events = [{"type": "step_start", "part": {"type": "step-start"}},
              {"type": "text", "part": {"type": "text", "text": "Summary: the fix is in."}},
              {"type": "step_finish", "part": {"type": "step-finish", "tokens": {"input": 9, "output": 3}}},
              {"type": "text", "part": {"type": "text", "synthetic": True, "metadata": {"compaction_continue": True},
                                        "text": "Continue if you have next steps, or stop and ask for clarification"}},
              {"type": "step_start", "part": {"type": "step-start"}},
              {"type": "text", "part": {"type": "text", "text": "Checking."}},
              {"type": "step_finish", "part": {"type": "step-finish"}}]
    conv = convert(events)
    assert [i["content"][0]["text"] for i in conv.items] == ["Summary: the fix is in.", "Checking."]
    assert conv.feedback == [{"after": conv.items[0]["id"],
                              "text": "Continue if you have next steps, or stop and ask for clarification"}]
    assert conv.unknown == 0


def test_generated_config(tmp_path):
    harness = get_harness("opencode")
    user = {"permission": {"bash": {"git log*": "allow"}}, "opencode_config": {"provider": {"sandbatch": {
        "options": {"timeout": 600000}}}, "instructions": ["AGENTS.md"]}, "context_window": 32000}
    cfg = harness.opencode_config(run_context("opencode", tmp_path, user, model_name="org/m-1", api_key="sk-secret-9"))
    provider = cfg["provider"]["sandbatch"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": "http://127.0.0.1:1234/v1", "apiKey": "{env:SANDBATCH_MODEL_API_KEY}",
                                   "timeout": 600000}
    assert provider["models"]["org/m-1"]["limit"] == {"context": 32000, "output": 32768}
    assert (cfg["model"], cfg["small_model"]) == ("sandbatch/org/m-1", "sandbatch/org/m-1")
    assert cfg["enabled_providers"] == ["sandbatch"] and cfg["autoupdate"] is False and cfg["share"] == "disabled"
    assert cfg["instructions"] == ["AGENTS.md"]
    bash = cfg["permission"]["bash"]
    assert bash["git log*"] == "allow" and bash["git show*"] == "deny" and list(bash)[0] == "*"
    assert cfg["permission"]["webfetch"] == "deny"
    assert DEFAULT_PERMISSION["bash"]["git log*"] == "deny"
    assert "sk-secret-9" not in json.dumps(cfg)  # the key is only in the agent's environment


def test_install_config_errors(tmp_path):
    harness = get_harness("opencode")
    (tmp_path / "prefix").mkdir()
    for install, message in [({"method": "yarn"}, "install.method"), ({"method": "upload"}, "install.source"),
                             ({"method": "upload", "source": str(tmp_path / "prefix")}, "no bin/opencode"),
                             ({"method": "path"}, "install.path")]:
        with pytest.raises(UserError, match=message):
            harness.check_config(harness.options_of({"install": install}))


# --- real OpenCode through the workflow ------------------------------------------------------

@pytest.fixture
def scripted_model():
    with scripted_model_server(SCRIPT) as served:
        yield served


@pytest.mark.slow
def test_real_opencode_resolves_smoke_tasks(tmp_path, tmp_path_factory, scripted_model, monkeypatch):
    need_program("npm", "run scripts/services/node.sh (as root)")
    url, model = scripted_model
    monkeypatch.setenv("SCRIPTED_UPSTREAM_KEY", "sk-upstream-secret-42")
    npm_cache = tmp_path_factory.getbasetemp() / "npm-cache"  # shared by the sandboxes of this session
    env = {"npm_config_cache": str(npm_cache)}
    harness = {"name": "opencode", "config": {"install": {"method": "npm", "env": env}}}
    tasks = ["smoke__calc-1", "smoke__textutils-1"]
    cfg = smoke_config(tmp_path, harness, tasks, model={"name": "scripted", "base_url": url, "tokens": "on",
                                                        "api_key_env": "SCRIPTED_UPSTREAM_KEY"},
                       timeouts={"agent": 300, "install": 600})
    run_dir, took = run_workflow(tmp_path, cfg)
    timings = {}
    for task in tasks:
        h = rollout(run_dir, task, "harness.json")
        assert (h["status"], h["exit_code"]) == ("ok", 0), h
        timings[task] = (h["install_s"], h["agent_s"])
        resp = rollout(run_dir, task, "response.json")
        calls = items_of(resp, "function_call")
        assert [c["name"] for c in calls] == ["bash", "bash"]
        outputs = items_of(resp, "function_call_output")
        assert [o["call_id"] for o in outputs] == [c["call_id"] for c in calls]
        assert items_of(resp, "reasoning")[0]["summary"][0]["text"] == "Find the code first."
        assert items_of(resp, "message")[-1]["content"][0]["text"] in (SCRIPT["tasks"]["divide() truncates"]["final"]["content"],
                                                                       SCRIPT["tasks"]["slugify() leaves"]["final"]["content"])
        assert resp["sandbatch"]["opencode_usage"]["steps"] == 3 and resp["sandbatch"]["unknown_events"] == 0
        grade = rollout(run_dir, task, "grade.json")
        assert grade["reward"] == 1.0, grade
        patch = rollout(run_dir, task, "patch.json")
        assert not any("opencode" in f or ".local" in f for f in patch["files"]), patch["files"]
    assert_valid_responses([rollout(run_dir, task, "response.json") for task in tasks])
    # what reached the model through the proxy: the model's name, the upstream key from the
    # environment (the agent only ever held a per-rollout proxy key), tools offered
    chat = [r for r in model.requests if r["path"].endswith("/chat/completions")]
    assert chat and all(r["body"]["model"] == "scripted" for r in chat)
    assert all(r["headers"].get("authorization") == "Bearer sk-upstream-secret-42" for r in chat)
    for f in run_dir.rglob("*"):
        assert not f.is_file() or b"sk-upstream-secret-42" not in f.read_bytes(), f
    # the usage summed in rollouts.jsonl is what the model reported, call for call
    rows = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert sum(r["usage"]["input_tokens"] for r in rows) == sum(u["prompt"] for u in model.reported_usage) > 0
    assert sum(r["usage"]["output_tokens"] for r in rows) == sum(u["completion"] for u in model.reported_usage)
    assert any("bash" in json.dumps(r["body"].get("tools")) for r in chat)
    # model.tokens: on; OpenCode streams: every turn's token ids and logprobs on its items
    assert all(r["body"]["stream"] is True and r["body"]["return_token_ids"] is True for r in chat)
    assert_token_data(run_dir, tasks, model)
    assert leftover_sandboxes(tmp_path) == []
    print(f"\nopencode via npm, 2 tasks: workflow {took:.1f} s; (install s, agent s) per task: {timings}")


# OpenCode compacting its context: the first command prints ~2,200 tokens (of the scripted
# model's toy tokenizer), so the second turn's usage passes the usable window (context 4,600
# - output 1,000) while the first turn's (~2,600) does not. OpenCode then asks for a summary
# of the conversation as a transcript (a request with no tools; its tool calls written
# "[Assistant tool call]: ...") and continues from the summary alone, its task message gone:
# the turns after it come from `default` (the summary is the conversation's one assistant turn).
SUMMARY = "Summary: calc.divide() used floor division; it now divides truly. Next: check it."
COMPACTING_SCRIPT = {
    "tasks": {"divide() truncates": [
        {"reasoning_content": "Find the code first.", "content": "Looking at the code.",
         "tool_calls": [{"name": "bash", "arguments": {"command": "seq 1 2000; grep -n 'def divide' -A 2 calc.py",
                                                       "description": "Show the code"}}]},
        {"content": "Applying the fix.",
         "tool_calls": [{"name": "bash", "arguments": {"command": CALC_EDIT, "description": "Edit the file"}}]},
    ]},
    "replies": {"[Assistant tool call]": {"content": SUMMARY}},
    "default": [{"content": "(not played: the summary is the first assistant turn)"},
                {"content": "Checking the fix.",  # its own call id: call_1_0 was the edit's, before the compaction
                 "tool_calls": [{"name": "bash", "id": "call_check",
                                 "arguments": {"command": "python3 -c 'import calc; print(calc.divide(7, 2))'",
                                               "description": "Check the fix"}}]}],
    "final": {"content": "divide() now returns the true quotient."},
}


@pytest.mark.slow
def test_real_opencode_compacting_its_context_starts_a_trusted_segment(tmp_path, tmp_path_factory):
    need_program("npm", "run scripts/services/node.sh (as root)")
    npm_cache = tmp_path_factory.getbasetemp() / "npm-cache"
    harness = {"name": "opencode", "config": {
        "install": {"method": "npm", "env": {"npm_config_cache": str(npm_cache)}},
        "context_window": 4600, "max_output_tokens": 1000,
        "opencode_config": {"compaction": {"tail_turns": 0}}}}  # no recent turn kept verbatim: one summary
    with scripted_model_server(COMPACTING_SCRIPT) as (url, model):
        cfg = smoke_config(tmp_path, harness, ["smoke__calc-1"], model={"name": "scripted", "base_url": url,
                                                                        "tokens": "on"},
                           timeouts={"agent": 300, "install": 600})
        run_dir, took = run_workflow(tmp_path, cfg)
    h = rollout(run_dir, "smoke__calc-1", "harness.json")
    assert (h["status"], h["exit_code"]) == ("ok", 0), h
    assert rollout(run_dir, "smoke__calc-1", "grade.json")["reward"] == 1.0
    chat = [r["body"] for r in model.requests if r["path"].endswith("/chat/completions")]
    compactions = [b for b in chat if "[Assistant tool call]" in json.dumps(b.get("messages"))
                   and not b.get("tools")]
    assert len(compactions) == 1, [b.get("messages") for b in chat]
    resp = rollout(run_dir, "smoke__calc-1", "response.json")
    join = resp["sandbatch"]["token_join"]
    # the turn after the compaction does not extend the previous turn (the proxy's own check
    # says so), yet it is no drift: a rewritten history, a clean start of a trusted segment
    calls = rollout(run_dir, "smoke__calc-1", "model_calls.jsonl")
    assert any((c.get("tokens") or {}).get("extends") is False for c in calls), calls
    # three segments: the task's turns, the summary (a conversation of its own), the turns after it
    assert (join["segments"], join["rewritten_turns"], join["drifted_turns"], join["untrusted_turns"]) == \
        (3, 2, 0, 0), join
    summary = next(i for i in resp["output"] if i["type"] == "message" and i["content"][0]["text"] == SUMMARY)
    assert (summary["segment"], summary["trusted"]) == (1, True)
    # OpenCode's own "Continue if you have next steps" is no assistant item
    assert [f["text"][:28] for f in resp["sandbatch"]["feedback"]] == ["Continue if you have next st"]
    turns = {i.get("arguments", ""): i for i in resp["output"] if "segment" in i and i["type"] == "function_call"}
    check = next((i for a, i in turns.items() if "calc.divide(7, 2)" in a), None)
    edit = next((i for a, i in turns.items() if "a // b" in a), None)
    assert check and edit, [(i["type"], i.get("segment"), str(i.get("arguments") or i.get("content"))[:80])
                            for i in resp["output"]]
    assert (edit["segment"], check["segment"], check["trusted"]) == (0, 2, True)
    # the first prompt of the new segment is the summary's conversation, not the task's
    assert check["prompt_token_ids"][:len(edit["prompt_token_ids"])] != edit["prompt_token_ids"]
    # every turn's ids are the upstream's, each segment a chain, Gym reads the items
    assert_token_data(run_dir, ["smoke__calc-1"], model)
    metrics = json.loads((run_dir / "metrics.json").read_text())["token_data"]
    assert (metrics["segments"], metrics["rollouts_rewritten"], metrics["untrusted_turns"]) == \
        (join["segments"], 1, 0)
    assert leftover_sandboxes(tmp_path) == []
    print(f"\nopencode compacting, 1 task: workflow {took:.1f} s; {len(chat)} model calls; token_join {join}")


@pytest.mark.slow
def test_hanging_opencode_is_stopped_at_its_timeout(tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBATCH_PROGRESS_EVERY", "1")
    # uploaded as a user's own opencode binary would be
    harness = {"name": "opencode", "config": {"install": {"method": "upload", "source": str(sleeper(tmp_path / "oc"))}}}
    with listed_model() as url:  # never called
        cfg = smoke_config(tmp_path, harness, ["smoke__calc-1"], model={"name": "m", "base_url": url},
                           timeouts={"agent": 3})
        run_dir, _ = run_workflow(tmp_path, cfg)
    h = rollout(run_dir, "smoke__calc-1", "harness.json")
    assert (h["status"], h["failure_class"], h["timed_out"]) == ("timeout", "agent_timeout", True)
    assert 2.5 < h["agent_s"] < 30
    assert rollout(run_dir, "smoke__calc-1", "events.jsonl") == [{"type": "step_start", "part": {}}]
    assert rollout(run_dir, "smoke__calc-1", "grade.json")["reward"] == 0.0
    # the long phase logged its progress while it ran
    log = (run_dir / "smoke__calc-1" / "0" / "logs" / "harness.log").read_text()
    assert "opencode smoke__calc-1/0: agent started" in log and "agent running for" in log
    assert "agent finished: timeout" in log
    assert leftover_sandboxes(tmp_path) == []
