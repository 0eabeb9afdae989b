"""trajectory.json is ATIF-v1.4: validated against a JSON Schema written from the field
tables of Harbor's RFC 0001 (tests/fixtures/atif-v1.4.schema.json), plus the rules Harbor's
validator adds (step ids 1..n, each source_call_id names a tool call of its step)."""

import json
from pathlib import Path

import jsonschema
import pytest

from ops_util import run
from sandbatch.rollout import atif, responses
from sandbatch.harness import get_harness

FIXTURES = Path(__file__).parent / "fixtures"
SCHEMA = json.loads((FIXTURES / "atif-v1.4.schema.json").read_text())
AGENT = {"name": "opencode", "version": "1.18.33", "model_name": "m"}


def validate(doc):
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    assert [s["step_id"] for s in doc["steps"]] == list(range(1, len(doc["steps"]) + 1))
    for s in doc["steps"]:
        ids = {c["tool_call_id"] for c in s.get("tool_calls", [])}
        for r in s.get("observation", {}).get("results", []):
            assert r.get("source_call_id") is None or r["source_call_id"] in ids, (r, ids)
    assert doc["final_metrics"]["total_steps"] == len(doc["steps"])


def recorded(harness, name):
    h = get_harness(harness)
    events = [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()]
    return responses.response(h.convert(events, h.options_of({})).items, responses.usage(100, 20), "m",
                              "completed", {})


def test_the_schema_refuses_what_the_spec_forbids():
    good = {"schema_version": "ATIF-v1.4", "session_id": "s", "agent": {"name": "a", "version": "1"},
            "steps": [{"step_id": 1, "source": "user", "message": "hi"}]}
    jsonschema.validate(good, SCHEMA)
    for bad in ({**good, "steps": [{"step_id": 1, "source": "user"}]},  # message is required
                {**good, "agent": {"name": "a"}},  # version is required
                {**good, "steps": [{"step_id": 1, "source": "tool", "message": ""}]},
                {**good, "steps": [{"step_id": 1, "source": "agent", "message": "", "tool_calls": [
                    {"tool_call_id": "c", "function_name": "f", "arguments": "ls"}]}]},  # arguments: an object
                {**good, "trajectory": []}):  # unknown field
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, SCHEMA)


def test_recorded_opencode_run():
    doc = atif.trajectory(recorded("opencode", "opencode_1.18.33_events.jsonl"), "fix it", AGENT, "r/t/0")
    validate(doc)
    steps = doc["steps"]
    assert steps[0] == {"step_id": 1, "source": "user", "message": "fix it"}
    assert [s["source"] for s in steps] == ["user", "agent", "agent", "agent"]
    first = steps[1]
    assert first["reasoning_content"] and first["message"]
    assert first["tool_calls"] == [{"tool_call_id": "call_0_0", "function_name": "bash",
                                    "arguments": {"command": "ls", "description": "list files"}}]
    assert first["observation"]["results"] == [{"source_call_id": "call_0_0",
                                                "content": "README.md\ncalc.py\npyproject.toml\ntests\n"}]
    assert steps[2]["tool_calls"][0]["tool_call_id"] == "call_1_0" and "observation" in steps[2]
    assert "tool_calls" not in steps[3] and steps[3]["message"]
    assert doc["final_metrics"]["total_prompt_tokens"] == 100 and doc["agent"] == AGENT


def test_recorded_mini_swe_agent_run():
    doc = atif.trajectory(recorded("mini-swe-agent", "mini_swe_agent_2.4.1_messages.jsonl"), "fix it", AGENT, "s")
    validate(doc)
    agent = [s for s in doc["steps"] if s["source"] == "agent"]
    assert [len(s.get("tool_calls", [])) for s in agent] == [1, 1, 0, 0, 0]  # three replies without a call
    assert agent[0]["reasoning_content"] == "Let me look at the files."


def test_mini_swe_agent_system_prompt_task_and_feedback_are_steps():
    """What mini said to the model: its system prompt, the task as its template rendered it,
    then each format-error message right after the reply it rejected."""
    h = get_harness("mini-swe-agent")
    conv = h.convert([json.loads(line) for line in (FIXTURES / "mini_swe_agent_2.4.1_messages.jsonl").read_text()
                      .splitlines()], h.options_of({}))
    resp = responses.response(conv.items, responses.usage(100, 20), "m", "completed", {"feedback": conv.feedback},
                              instructions=conv.instructions, input_=conv.input)
    doc = atif.trajectory(resp, "the bare prompt", AGENT, "s")
    validate(doc)
    shape = [(s["source"], s["message"].split("\n")[0][:24]) for s in doc["steps"]]
    assert shape[:2] == [("system", "You are a helpful assista"[:24]), ("user", "Please solve this issue:")]
    assert shape[-6:] == [("agent", "Done."), ("user", "Tool call error:")] * 3


def test_per_step_metrics_when_model_calls_line_up():
    items = [responses.message("look"), responses.function_call("c1", "bash", {"command": "ls"}),
             responses.function_call_output("c1", "a.py"), responses.message("done")]
    resp = responses.response(items, responses.usage(30, 7), "m", "completed", {})
    calls = [{"status": 200, "usage": {"prompt_tokens": 10, "completion_tokens": 5, "cached_tokens": 2}},
             {"status": 200, "usage": {"prompt_tokens": 20, "completion_tokens": 2, "cached_tokens": 8}}]
    doc = atif.trajectory(resp, None, AGENT, "s", calls)
    validate(doc)
    assert [s["metrics"]["prompt_tokens"] for s in doc["steps"]] == [10, 20]
    assert doc["steps"][0]["observation"]["results"][0]["source_call_id"] == "c1"
    # a failed call in between: the turns no longer line up, so no per-step metrics
    doc = atif.trajectory(resp, None, AGENT, "s", [calls[0], {"status": 502}, calls[1], calls[1]])
    assert all("metrics" not in s for s in doc["steps"])


def test_odd_items_stay_valid():
    items = [responses.function_call("c1", "apply", "not json"), responses.function_call_output("zz", "stray")]
    doc = atif.trajectory(responses.response(items, responses.usage(), "m", "completed", {}), "p", AGENT, "s")
    validate(doc)
    step = doc["steps"][1]
    assert step["tool_calls"][0]["arguments"] == {"input": "not json"}
    assert step["observation"]["results"] == [{"content": "stray"}]  # no call of that id: unattributed


@pytest.mark.slow
def test_the_workflow_writes_valid_trajectories(tmp_path):
    done = run(tmp_path, "--config", "benchmark={'limit': 1}")
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((tmp_path / "results/default/smoke__calc-1/0/trajectory.json").read_text())
    validate(doc)
    assert doc["steps"][0]["message"].startswith("divide() truncates")
    assert doc["steps"][1]["tool_calls"][0]["function_name"] == "apply_patch"
    assert "Applied patch calc.py cleanly." in doc["steps"][1]["observation"]["results"][0]["content"]
    assert doc["agent"] == {"name": "oracle", "version": "unknown"}  # no model: no model_name
    assert doc["extra"]["sandbatch"]["instance_id"] == "smoke__calc-1"
