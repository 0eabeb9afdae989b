"""The proxy's Responses endpoint translated to Chat Completions (`model.proxy.responses:
translate`), over real sockets to the scripted model: the answers in Responses' shape, and
the ids of the whole generation (reasoning and tool calls too) recorded, so that the turn
after one that reasoned extends it and stays trusted."""

from __future__ import annotations

import copy
import json

import httpx
import pytest

from sandbatch.proxy import ModelProxy
from sandbatch.proxy import responses_api
from sandbatch.rollout.token_join import attach
from sandbatch.core.util import iter_jsonl
from harness_support import scripted_model_server

SCRIPT = {"tasks": {"inst-1": [
    {"reasoning_content": "Look around first.", "content": "Listing files.",
     "tool_calls": [{"name": "exec_command", "arguments": {"cmd": "ls -1"}}]},
    {"reasoning_content": "The patch goes in.", "tool_calls": [{"name": "apply_patch", "arguments": {
        "input": "*** Begin Patch\n*** End Patch"}}]},
    {"content": "The fix is in."},
]}}
TOOLS = [{"type": "function", "name": "exec_command", "description": "Run a command", "strict": False,
          "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}},
         {"type": "custom", "name": "apply_patch", "description": "Edit files",
          "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch"}},
         {"type": "web_search"}]


@pytest.fixture
def scripted():
    with scripted_model_server(copy.deepcopy(SCRIPT)) as (url, model):
        model.url = url
        yield model


def events(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def test_translated_turns_carry_the_whole_generations_ids_and_stay_trusted(scripted, tmp_path):
    path = tmp_path / "model_calls.jsonl"
    body = {"model": "agent-model", "instructions": "You are an agent.", "tools": TOOLS, "stream": True,
            "store": False, "include": ["reasoning.encrypted_content"], "reasoning": {"effort": "high"},
            "input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
                      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Solve inst-1."}]}]}
    items: list[dict] = []
    with ModelProxy({"responses": "translate", "require_agent_key": False}, scripted.url, None, path,
                    tokens="on") as p:
        for n, output in enumerate(["ls: a.py", "Done!"]):
            answer = httpx.post(p.url_for("127.0.0.1") + "/responses", json=body, timeout=30)
            assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
            final = events(answer.text)[-1]
            assert final["type"] == "response.completed", final
            produced = final["response"]["output"]
            items += produced
            # the history as Codex sends it back: its items, then the tool's answer
            calls = [i for i in produced if i["type"] in ("function_call", "custom_tool_call")]
            outputs = [{"type": f"{c['type']}_output", "call_id": c["call_id"], "output": output} for c in calls]
            items += outputs
            body = {**body, "input": body["input"] + produced + outputs}
        last = httpx.post(p.url_for("127.0.0.1") + "/responses", json={**body, "stream": False}, timeout=30).json()
        items += last["output"]
    assert [i["type"] for i in items] == ["reasoning", "message", "function_call", "function_call_output",
                                          "reasoning", "custom_tool_call", "custom_tool_call_output", "message"]
    assert items[5]["input"] == "*** Begin Patch\n*** End Patch" and items[5]["name"] == "apply_patch"
    assert last["status"] == "completed" and last["output"][0]["content"][0]["text"] == "The fix is in."
    reply = scripted.reply(scripted.requests[-1]["body"])
    assert last["usage"]["input_tokens"] == reply.prompt_tokens
    assert all(r["path"] == "/v1/chat/completions" for r in scripted.requests)
    sent = scripted.requests[1]["body"]
    assert sent["messages"][:3] == [{"role": "system", "content": "You are an agent."},
                                    {"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "Solve inst-1."}]
    # one assistant message per turn, the reasoning carried back, the call ids kept
    assert sent["messages"][3] == {"role": "assistant", "content": "Listing files.",
                                   "reasoning_content": "Look around first.", "tool_calls": [
                                       {"id": items[2]["call_id"], "type": "function",
                                        "function": {"name": "exec_command", "arguments": items[2]["arguments"]}}]}
    assert sent["messages"][4] == {"role": "tool", "tool_call_id": items[2]["call_id"], "content": "ls: a.py"}
    assert [t["function"]["name"] for t in sent["tools"]] == ["exec_command", "apply_patch"]
    rows = list(iter_jsonl(path))
    assert [(r["endpoint"], r["upstream_endpoint"]) for r in rows] == [("responses", "chat")] * 3
    assert rows[0]["server_tools_dropped"] == ["web_search"] and rows[0]["fields_dropped"] == ["reasoning"]
    # the generation's ids are the whole completion's: reasoning, text and the call
    for row, request in zip(rows, scripted.requests):
        assert row["tokens"]["generation"] == [i for _, i in scripted.reply(request["body"]).generated()]
    assert [r["tokens"]["extends"] for r in rows] == [None, True, True]
    counts, _ = attach(items, rows)
    assert (counts.matched_items, counts.unmatched_items, counts.turns_with_tokens) == (5, 0, 3), counts
    assert (counts.segments, counts.drifted_turns, counts.untrusted_turns) == (1, 0, 0), counts
    assert [i["trusted"] for i in items if "trusted" in i] == [True] * 3


def test_request_translation_keeps_roles_and_leaves_out_what_chat_cannot_take():
    chat, left_out = responses_api.to_chat({
        "model": "m", "input": "hello", "max_output_tokens": 7, "tool_choice": {"type": "function", "name": "x"},
        "tools": [{"type": "function", "name": "x", "parameters": {"type": "object"}}],
        "previous_response_id": "resp_1"})
    assert chat == {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 7,
                    "tools": [{"type": "function", "function": {"name": "x", "parameters": {"type": "object"}}}],
                    "tool_choice": {"type": "function", "function": {"name": "x"}}}
    assert left_out == {"fields_dropped": ["previous_response_id"]}
    chat, left_out = responses_api.to_chat({"input": [{"type": "item_reference", "id": "x"}]})
    assert chat["messages"] == [] and left_out == {"items_dropped": ["item_reference"]}
    truncated = responses_api.from_chat({"choices": [{"message": {"content": "par"}, "finish_reason": "length"}]},
                                        {"model": "m"})
    assert (truncated["status"], truncated["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})
