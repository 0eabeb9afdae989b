"""Token ids and logprobs (model.tokens): asked for, recorded as prompt deltas, joined to items.

Against the scripted model, which answers as vLLM does (its toy chat template makes a
prompt extend the previous turn's prompt + generation exactly when the history comes back
as generated), through the real proxy over 127.0.0.1, with openai-python as the client.
"""

from __future__ import annotations

import copy
import json

import openai
import pytest

from sandbatch.rollout import responses, token_join
from sandbatch.proxy import ModelProxy
from sandbatch.proxy.restream import responses_stream
from sandbatch.proxy.tokens import PromptLog, TokenCollector, decode_histories, decode_prompts
from sandbatch.testing.scripted_model import Script, ScriptedModel
from sandbatch.testing.template import logprob
from sandbatch.core.util import iter_jsonl

SCRIPT = {"tasks": {"inst-1": [
    {"reasoning_content": "Look around first.", "content": "Listing files.",
     "tool_calls": [{"name": "bash", "arguments": {"command": "ls -1"}}]},
    {"content": "Running the tests.", "tool_calls": [{"name": "bash", "arguments": {"command": "pytest -q"}}]},
    {"content": "The fix is in."},
]}}
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}}}}]


@pytest.fixture
def served():
    def start(**script_extra):
        model = ScriptedModel(Script.from_dict({**copy.deepcopy(SCRIPT), **script_extra}))
        servers.append(model.serve())
        model.url = f"http://127.0.0.1:{servers[-1].port}/v1"
        return model

    servers = []
    yield start
    for server in servers:
        server.stop()


SUMMARY = "Summary: the files are listed; the tests come next."


def run_chat(model, out, tokens="on", stream=False, send_reasoning=True, compact_after=None):
    """An agent loop over Chat Completions through a proxy: three turns of SCRIPT.
    `compact_after` N: after turn N the agent compacts its history as OpenCode does (the
    task, its summary as an assistant turn, a request to continue)."""
    with ModelProxy({"require_agent_key": False}, model.url, None, out / "model_calls.jsonl", tokens=tokens) as p:
        client = openai.OpenAI(base_url=p.url_for("127.0.0.1"), api_key="k")
        messages = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Solve inst-1."}]
        for turn in range(3):
            if turn == compact_after:
                messages = messages[:2] + [{"role": "assistant", "content": SUMMARY},
                                           {"role": "user", "content": "Continue if you have next steps."}]
            if stream:
                text, reasoning, calls = "", "", {}
                for chunk in client.chat.completions.create(model="m", messages=messages, tools=TOOLS, stream=True):
                    for choice in chunk.choices:
                        d = choice.delta
                        text += d.content or ""
                        reasoning += getattr(d, "reasoning_content", None) or ""
                        for c in d.tool_calls or []:
                            entry = calls.setdefault(c.index, {"id": c.id, "type": "function",
                                                               "function": {"name": "", "arguments": ""}})
                            entry["function"]["name"] += c.function.name or ""
                            entry["function"]["arguments"] += c.function.arguments or ""
                message = {"role": "assistant", "content": text, "tool_calls": list(calls.values()) or None}
                if reasoning:
                    message["reasoning_content"] = reasoning
            else:
                got = client.chat.completions.create(model="m", messages=messages, tools=TOOLS).choices[0].message
                message = got.model_dump(exclude_none=True)
            if not send_reasoning:
                message.pop("reasoning_content", None)
            messages.append({k: v for k, v in message.items() if v is not None})
            for call in message.get("tool_calls") or []:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": "ok"})
    return list(iter_jsonl(out / "model_calls.jsonl"))


def upstream_sent(model):
    """(prompt ids, generated ids, logprobs) of every reply, as the scripted model made them."""
    out = []
    for request in model.requests:
        reply = model.reply(request["body"])
        generated = [i for _, i in reply.generated()]
        out.append((reply.prompt_ids, generated, [logprob(i) for i in generated]))
    return out


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_on_asks_chat_for_tokens_and_records_prompts_as_deltas(served, tmp_path, stream):
    model = served()
    rows = run_chat(model, tmp_path, stream=stream)
    sent = [r["body"] for r in model.requests]
    assert all(b["logprobs"] is True and b["return_token_ids"] is b["return_tokens_as_token_ids"] is True
               for b in sent)
    assert [r["call"] for r in rows] == [1, 2, 3] and all(r["stream"] is stream for r in rows)
    truth = upstream_sent(model)
    prompts = decode_prompts(rows)
    for row, (prompt, generated, lps) in zip(rows, truth):
        assert prompts[row["call"]] == prompt  # rebuilt id for id from the deltas
        assert row["tokens"]["generation"] == generated and row["tokens"]["logprobs"] == lps
    # the first call's prompt is stored whole; the later ones only as what was added
    assert rows[0]["tokens"]["prompt"] == {"base": None, "keep": 0, "ids": truth[0][0]}
    for n in (1, 2):
        delta = rows[n]["tokens"]["prompt"]
        assert delta["base"] == n and delta["keep"] == len(truth[n - 1][0]) + len(truth[n - 1][1])
        assert len(delta["ids"]) < 20 < len(truth[n][0])
    assert [r["tokens"]["extends"] for r in rows] == [None, True, True]


def test_history_rendered_differently_is_drift(served, tmp_path):
    # the template drops the first turn's reasoning from the history: turn 2 does not extend turn 1
    rows = run_chat(served(drop_history_reasoning=True), tmp_path)
    assert [r["tokens"]["extends"] for r in rows] == [None, False, True]
    # the delta still keeps what the prompts share: turn 1's prompt, up to the dropped reasoning
    assert rows[1]["tokens"]["prompt"]["keep"] == len(decode_prompts(rows)[1])
    # an agent that does not send the reasoning back drifts the same way
    rows = run_chat(served(), tmp_path / "b", send_reasoning=False)
    assert [r["tokens"]["extends"] for r in rows] == [None, False, True]


def test_auto_records_what_comes_and_off_records_nothing(served, tmp_path):
    model = served()
    rows = run_chat(model, tmp_path / "auto", tokens="auto")
    assert not any("logprobs" in r["body"] for r in model.requests)
    assert all("tokens" not in r and "output" not in r for r in rows)  # nothing asked, nothing came
    model = served()
    with ModelProxy({"require_agent_key": False, "extra_body": {"logprobs": True, "return_token_ids": True}},
                    model.url, None, tmp_path / "auto2" / "calls.jsonl") as p:
        client = openai.OpenAI(base_url=p.url_for("127.0.0.1"), api_key="k")
        for stream in (False, True):  # the agent (here extra_body) asked: recorded, streamed or not
            answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Solve inst-1."}],
                                                    tools=TOOLS, stream=stream)
            if stream:
                list(answer)
    rows = list(iter_jsonl(tmp_path / "auto2" / "calls.jsonl"))
    assert len(rows) == 2 and rows[0]["output"] == rows[1]["output"]
    assert all(r["tokens"]["generation"] == upstream_sent(model)[0][1] for r in rows)
    rows = run_chat(served(), tmp_path / "off", tokens="off")
    assert all("tokens" not in r and "output" not in r for r in rows)


def test_on_streamed_responses_call_is_made_plain_upstream_and_streamed_back(served, tmp_path):
    model = served()
    with ModelProxy({"require_agent_key": False}, model.url, None, tmp_path / "calls.jsonl", tokens="on") as p:
        client = openai.OpenAI(base_url=p.url_for("127.0.0.1"), api_key="k")
        events = list(client.responses.create(model="m", input="Solve inst-1.", stream=True))
        plain = client.responses.create(model="m", input="Solve inst-1.")
    assert [e.type for e in events][:2] == ["response.created", "response.in_progress"]
    final = events[-1].response
    assert events[-1].type == "response.completed" and final.output_text == plain.output_text == "Listing files."
    assert [i.type for i in final.output] == ["reasoning", "message", "function_call"]
    assert final.output[2].call_id == "call_0_0"
    body = model.requests[0]["body"]
    assert body["stream"] is False and "message.output_text.logprobs" in body["include"]
    rows = list(iter_jsonl(tmp_path / "calls.jsonl"))
    assert rows[0]["restreamed"] is True and rows[0]["stream"] is True
    reply = model.reply(body)
    text_ids = [i for _, i in dict(reply.generation())["content"]]
    for row in rows:  # Responses give the text's logprobs only; ids come as token_id:N
        assert row["tokens"]["generation"] == text_ids and row["tokens"]["logprobs"] == [logprob(i) for i in text_ids]
        assert decode_prompts(rows)[row["call"]] == reply.prompt_ids


def test_on_restreams_chat_once_a_stream_came_without_token_ids(served, tmp_path):
    model = served(stream_tokens=False)  # a server whose streams carry no token data
    rows = run_chat(model, tmp_path, stream=True)
    assert [r.get("restreamed", False) for r in rows] == [False, True, True]
    assert [r["body"]["stream"] for r in model.requests] == [True, False, False]
    # the first turn's tokens never came, so the second's cannot be compared with them
    assert "tokens" not in rows[0] and [r["tokens"]["extends"] for r in rows[1:]] == [None, True]
    truth = upstream_sent(model)
    prompts = decode_prompts(rows)
    assert [prompts[r["call"]] for r in rows[1:]] == [t[0] for t in truth[1:]]
    assert all(r["usage"]["completion_tokens"] == len(t[1]) for r, t in zip(rows, truth))  # usage chunk sent back
    # the agent read the same conversation from the restreamed answers: three turns, as scripted
    assert [model.reply(r["body"]).content for r in model.requests] == ["Listing files.", "Running the tests.",
                                                                        "The fix is in."]


def test_restream_is_what_openai_python_reads_as_the_same_response():
    response = {"id": "resp_1", "object": "response", "created_at": 0, "status": "completed", "model": "m",
                "output": [{"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "hm"}]},
                           {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                            "content": [{"type": "output_text", "text": "hi", "annotations": [], "logprobs": []}]}],
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
    from openai.types.responses import ResponseStreamEvent
    from pydantic import TypeAdapter

    adapter = TypeAdapter(ResponseStreamEvent)
    events = [adapter.validate_python(json.loads(block.split("data: ", 1)[1]))
              for block in responses_stream(response).decode().strip().split("\n\n")]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].response.model_dump(exclude_none=True)["output"] == response["output"]


def test_prompt_log_keeps_conversation_heads_and_picks_the_longest_shared_prefix():
    log = PromptLog(keep=2)
    a = log.record(1, [1, 2, 3], [4], [-0.1], False)
    b = log.record(2, [9, 9], [8], [-0.2], False)  # another conversation (a title request)
    c = log.record(3, [1, 2, 3, 4, 5], [6], [-0.3], True)  # continues call 1: its head now
    assert a["prompt"] == {"base": None, "keep": 0, "ids": [1, 2, 3]} and b["prompt"]["base"] is None
    assert c["prompt"] == {"base": 1, "keep": 4, "ids": [5]} and c["extends"] is True
    turns = [log.record(n, [7, n], [0], [-0.5], False) for n in (4, 5)]  # two more conversations
    assert turns[0]["prompt"]["base"] is None and turns[1]["prompt"] == {"base": 4, "keep": 1, "ids": [5]}
    d = log.record(6, [7, 5, 0, 1], [2], [-0.4], True)  # continues call 5 (call 4 shares less)
    assert d["prompt"] == {"base": 5, "keep": 3, "ids": [1]} and d["extends"] is True
    e = log.record(7, [1, 2, 3, 4, 5, 7], [0], [-0.4], True)  # call 3's head left the window: whole, unknown
    assert e["prompt"] == {"base": None, "keep": 0, "ids": [1, 2, 3, 4, 5, 7]} and e["extends"] is None
    f = log.record(8, [1, 2, 3, 4, 5, 7, 0, 6], [1], [-0.4], True)
    assert f["prompt"] == {"base": 7, "keep": 7, "ids": [6]} and f["extends"] is True
    rows = [{"call": n, "tokens": t} for n, t in zip((1, 2, 3, 4, 5, 6, 7, 8), (a, b, c, *turns, d, e, f))]
    assert decode_prompts(rows) == {1: [1, 2, 3], 2: [9, 9], 3: [1, 2, 3, 4, 5], 4: [7, 4], 5: [7, 5],
                                    6: [7, 5, 0, 1], 7: [1, 2, 3, 4, 5, 7], 8: [1, 2, 3, 4, 5, 7, 0, 6]}
    assert log.record(9, None, None, None, True) is None


def test_a_conversation_keeps_its_head_while_many_others_run():
    log = PromptLog(keep=2)
    main = log.record(1, [1, 2], [3], [-0.1], False)
    sub = [log.record(n, [8] * 3 + list(range(n)), [0], [-0.1], n > 2) for n in range(2, 30)]  # a sub-agent
    back = log.record(30, [1, 2, 3, 4], [5], [-0.1], True)
    assert main and all(sub) and back["prompt"] == {"base": 1, "keep": 3, "ids": [4]} and back["extends"] is True


def test_collector_reads_vllm_and_legacy_shapes():
    c = TokenCollector()
    c.add({"prompt_token_ids": [1, 2], "choices": [{"index": 0, "message": {"content": "x"}, "logprobs": {
        "content": [{"token": "token_id:7", "logprob": -0.5}, {"token": "token_id:8", "logprob": -0.25}]}}]})
    assert (c.prompt_token_ids, c.generation(), c.logprobs) == ([1, 2], [7, 8], [-0.5, -0.25])
    split = TokenCollector()  # reasoning's logprobs apart from the content's
    split.add({"choices": [{"index": 0, "message": {"content": "x"}, "logprobs": {
        "content": [{"token": "token_id:9", "logprob": -0.5}], "reasoning_content": [{"token": "token_id:3", "logprob": -1}]}}]})
    assert (split.generation(), split.logprobs) == ([3, 9], [-1, -0.5])
    legacy = TokenCollector()
    legacy.add({"choices": [{"index": 0, "text": "ab", "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-1, -2]}}]})
    assert legacy.generation() is None and legacy.logprobs == [-1, -2] and legacy.output()["text"]


# --- the join ----------------------------------------------------------------------------------

def call_row(n, text=None, calls=(), prompt=(1,), generation=(5, 6), extends=None, base=None, keep=0,
             history=None, logprobs=None):
    """A model_calls.jsonl line; `history`: its messages' digests, stored whole."""
    from sandbatch.proxy.tokens import arguments_digest, digest

    output = {"text": digest(text)} if text else {}
    if calls:
        output["calls"] = [[cid, name, arguments_digest(args)] for cid, name, args in calls]
    row = {"call": n, "status": 200, "endpoint": "chat", "usage": {"prompt_tokens": 1, "completion_tokens": 2},
           "output": output, "tokens": {"prompt": {"base": base, "keep": keep, "ids": list(prompt)},
                                        "generation": list(generation),
                                        "logprobs": [-0.5] * len(generation) if logprobs is None else logprobs,
                                        "extends": extends}}
    if history is not None:
        row["history"] = {"base": None, "keep": 0, "ids": list(history)}
    return row


def test_join_by_content_not_position():
    items = [responses.message("Looking."), responses.function_call("c1", "bash", '{"command": "ls"}'),
             responses.function_call_output("c1", "a.py"), responses.message("Looking."),
             responses.function_call("call_0", "shell", {"cmd": "pytest"}),  # numbered by the harness (pool)
             responses.function_call_output("call_0", "ok"), responses.message("Done.")]
    rows = [call_row(1, "Looking.", [("c1", "bash", '{"command":"ls"}')]),
            call_row(2, "Title of the task", prompt=(7,)),  # a side call (OpenCode's title): no item
            call_row(3, "Looking.", [("chatcmpl-tool-9", "shell", '{"cmd":"pytest"}')], prompt=(3, 4), base=1,
                     keep=3, extends=True),
            {"call": 4, "status": 502, "endpoint": "chat"},  # failed: nothing to join
            call_row(5, "Done.", generation=(9,), prompt=(2,), base=3, keep=6, extends=False)]
    for row, history in zip(rows[:3] + rows[4:], ([10, 11], [20], [10, 11, 12, 13], [10, 11, 12, 13, 14, 15])):
        row["history"] = {"base": None, "keep": 0, "ids": history}
    counts, turns = token_join.attach(items, rows)
    assert counts.model_dump() == {"calls": 4, "matched_calls": 3, "unmatched_calls": 1, "items": 5, "matched_items": 5,
                      "unmatched_items": 0, "turns_with_tokens": 2, "continuing_turns": 2, "drifted_turns": 1,
                      "segments": 2, "rewritten_turns": 0, "untrusted_turns": 1}
    carrying = [i["type"] for i in items if "segment" in i]
    assert carrying == ["function_call", "function_call", "message"]  # the last item of each turn
    assert items[1]["prompt_token_ids"] == [1] and items[1]["generation_token_ids"] == [5, 6]
    assert items[4]["prompt_token_ids"] == [1, 5, 6, 3, 4]  # call 3's delta on call 1
    assert [(items[i]["segment"], items[i]["trusted"]) for i in (1, 4, 6)] == [(0, True), (0, True), (1, False)]
    # call 5 kept the history but its prompt does not extend call 3's prompt + generation:
    # drift, a segment of its own, its ids left off the item
    assert [t.start for t in turns if t.items] == ["first", None, "drift"]
    assert not any(f in items[6] for f in token_join.TRAINING_FIELDS)
    assert "segment" not in items[0] and "segment" not in items[3]


def test_a_rewritten_history_starts_a_trusted_segment():
    """A compaction: turn 3's request no longer starts with turn 2's messages, and its prompt
    does not extend turn 2's; turn 4 extends turn 3."""
    items = [responses.message(t) for t in ("one", "two", "three", "four")]
    rows = [call_row(1, "one", prompt=(1, 2), history=[10, 11]),
            call_row(2, "two", prompt=(7,), base=1, keep=4, extends=True, history=[10, 11, 12, 13]),
            call_row(3, "summary", prompt=(1, 9), history=[10, 11, 14, 15]),  # the compaction request: no item
            call_row(4, "three", prompt=(1, 30, 31), extends=False, history=[10, 50, 51]),
            call_row(5, "four", prompt=(40,), base=4, keep=5, extends=True, history=[10, 50, 51, 52, 53])]
    counts, turns = token_join.attach(items, rows)
    assert [(i["segment"], i["trusted"]) for i in items] == [(0, True), (0, True), (1, True), (1, True)]
    assert [t.start for t in turns if t.items] == ["first", None, "rewritten", None]
    assert items[2]["prompt_token_ids"] == [1, 30, 31] and items[3]["prompt_token_ids"] == [1, 30, 31, 5, 6, 40]
    # each segment is a chain: every prompt extends the previous turn's prompt + generation
    for a, b in ((0, 1), (2, 3)):
        head = items[a]["prompt_token_ids"] + items[a]["generation_token_ids"]
        assert items[b]["prompt_token_ids"][:len(head)] == head
    assert (counts.segments, counts.rewritten_turns, counts.untrusted_turns, counts.turns_with_tokens,
            counts.drifted_turns, counts.unmatched_calls) == (2, 1, 0, 4, 0, 1)


def test_turns_that_cannot_be_checked_fail_closed():
    items = [responses.message(t) for t in ("one", "two", "three", "four", "five")]
    rows = [call_row(1, "one", prompt=(1, 2), history=[10, 11]),
            # its logprobs came short: no training fields, still in the segment by its messages
            call_row(2, "two", prompt=(7,), base=1, keep=4, logprobs=[-0.1], history=[10, 11, 12]),
            # extends call 2 token for token, but call 2's ids could not be used: unverified
            call_row(3, "three", prompt=(8,), base=2, keep=7, history=[10, 11, 12, 13]),
            call_row(4, "four", prompt=(9,), base=3, keep=10),  # no messages recorded: nothing to check
            call_row(5, "five", prompt=(3,), base=4, keep=13, history=[10, 11, 12, 13, 14])]
    counts, turns = token_join.attach(items, rows)
    assert [t.start for t in turns] == ["first", None, "unverified", None, None]
    assert [(i["segment"], i["trusted"]) for i in items] == [(0, True), (0, False), (1, False), (1, True), (1, True)]
    assert [("prompt_token_ids" in i) for i in items] == [True, False, False, True, True]
    assert (counts.segments, counts.untrusted_turns, counts.turns_with_tokens) == (2, 2, 3)
    # a prompt that does not extend the previous one, whose messages cannot be compared: unverified
    items = [responses.message(t) for t in ("one", "two")]
    _, turns = token_join.attach(items, [call_row(1, "one", prompt=(1, 2)), call_row(2, "two", prompt=(4, 4))])
    assert [(t.start, t.trusted) for t in turns] == [("first", True), ("unverified", False)]


def test_proxy_records_each_requests_messages_for_the_segments(served, tmp_path):
    """The real proxy before the scripted model: an agent compacting after its second turn
    (the history rewritten, the prompt starting afresh) starts a trusted second segment."""
    model = served()
    rows = run_chat(model, tmp_path, compact_after=2)
    histories = decode_histories(rows)
    assert [len(histories[n]) for n in (1, 2, 3)] == [2, 4, 4]  # system, user; the answer and its tool output
    assert histories[2][:2] == histories[1] and histories[3][:2] == histories[1]
    assert histories[3][:len(histories[2])] != histories[2]
    assert rows[1]["history"] == {"base": 1, "keep": 2, "ids": histories[2][2:]}  # a delta like the prompt's
    # the proxy's own check against the head of the conversation says it does not extend
    assert [r["tokens"]["extends"] for r in rows] == [None, True, False]
    counts, turns = token_join.attach(played(model), rows)
    assert [(t.segment, t.start, t.trusted) for t in turns] == [(0, "first", True), (0, None, True),
                                                                 (1, "rewritten", True)]
    assert (counts.segments, counts.drifted_turns, counts.untrusted_turns) == (2, 0, 0)
    truth = upstream_sent(model)
    assert [t.items[-1]["prompt_token_ids"] for t in turns] == [t[0] for t in truth]
    # drift is not a rewrite: the history kept, its reasoning rendered away
    model = served(drop_history_reasoning=True)
    rows = run_chat(model, tmp_path / "drift")
    counts, turns = token_join.attach(played(model), rows)
    assert [(t.segment, t.start, t.trusted) for t in turns] == [(0, "first", True), (1, "drift", False),
                                                                 (1, None, True)]
    assert (counts.drifted_turns, counts.untrusted_turns, counts.rewritten_turns) == (1, 1, 0)


def test_scripted_model_answers_a_compaction_request_and_names_calls_as_told():
    model = ScriptedModel(Script.from_dict({**copy.deepcopy(SCRIPT), "replies": {"[Assistant tool call]": SUMMARY},
                                            "default": [{"tool_calls": [{"name": "bash", "id": "call_x",
                                                                         "arguments": {"command": "ls"}}]}]}))
    transcript = {"messages": [{"role": "user", "content": "Summarise:\n[Assistant tool call]: bash(ls)"}]}
    assert (model.reply(transcript).content, model.reply(transcript).calls) == (SUMMARY, [])
    other = model.reply({"messages": [{"role": "user", "content": "What did we do so far?"}], "tools": TOOLS})
    assert other.calls == [("call_x", "bash", '{"command": "ls"}')]


def played(model):
    """The Responses items of the turns the scripted model played (its tool calls' outputs between)."""
    items = []
    for request in model.requests:
        reply = model.reply(request["body"])
        items += [responses.reasoning(reply.reasoning)] if reply.reasoning else []
        items += [responses.message(reply.content)] if reply.content else []
        for call_id, name, args in reply.calls:
            items += [responses.function_call(call_id, name, args), responses.function_call_output(call_id, "ok")]
    return items


def test_atif_step_metrics_carry_the_joined_turns_tokens():
    import jsonschema
    from pathlib import Path

    from sandbatch.rollout import atif

    items = [responses.message("Looking."), responses.function_call("c1", "bash", '{"command": "ls"}'),
             responses.function_call_output("c1", "a.py"), responses.message("Done.")]
    rows = [{"call": 1, "status": 502, "endpoint": "chat"},  # failed first: position alone would misalign
            call_row(2, "Looking.", [("c1", "bash", '{"command":"ls"}')]),
            call_row(3, "Done.", generation=(9,), prompt=(2,), base=2, keep=3, extends=True)]
    _, turns = token_join.attach(items, rows)
    doc = atif.trajectory(responses.response(items, responses.usage(), "m", "completed", {}), "fix it",
                          {"name": "a", "version": "1", "model_name": "m"}, "s", rows, turns=turns)
    schema = json.loads((Path(__file__).parent / "fixtures" / "atif-v1.4.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(doc)
    metrics = [s.get("metrics") for s in doc["steps"][1:]]
    assert [m["completion_token_ids"] for m in metrics] == [[5, 6], [9]]
    assert [m["prompt_token_ids"] for m in metrics] == [[1], [1, 5, 6, 2]] and metrics[1]["logprobs"] == [-0.5]


def test_items_without_a_call_are_counted():
    items = [responses.message("never said"), responses.reasoning("nor this")]
    counts, _ = token_join.attach(items, [call_row(1, "something else")])
    assert (counts.unmatched_items, counts.unmatched_calls, counts.turns_with_tokens) == (2, 1, 0)
    assert not any("prompt_token_ids" in i for i in items)
    # no call recorded its output (model.tokens off, or nothing came): nothing to count
    assert token_join.attach(items, [{"call": 1, "status": 200, "endpoint": "chat", "usage": {}}]) == (None, [])


# --- the setting ---------------------------------------------------------------------------------

def test_model_tokens_setting(tmp_path):
    from sandbatch.core.config import load
    from sandbatch.core.errors import UserError

    path = tmp_path / "run.yaml"
    path.write_text("model:\n  tokens: on\n")  # YAML 1.1 reads an unquoted on as true
    assert load([path]).model.tokens == "on"
    path.write_text("model:\n  tokens: off\n")
    assert load([path]).model.tokens == "off"
    assert load([]).model.tokens == "auto"
    path.write_text("model:\n  tokens: on\n  proxy: {enabled: false}\n")
    with pytest.raises(UserError, match=r"^model\.tokens: 'on' needs the model proxy.*model\.proxy\.enabled: true"):
        load([path])
    path.write_text("model:\n  tokens: always\n")
    with pytest.raises(UserError, match=r"run\.yaml: model\.tokens"):
        load([path])
