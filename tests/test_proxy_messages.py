"""The proxy's Anthropic Messages endpoint, driven by Anthropic's own Python client, over real
sockets: translated to Chat Completions for the scripted model, or passed through."""

from __future__ import annotations

import copy
import json
import threading

import anthropic
import httpx
import pytest

from sandbatch.proxy import ModelProxy
from sandbatch.proxy import messages as messages_api
from sandbatch.proxy.tokens import arguments_digest
from sandbatch.testing.scripted_model import Script, ScriptedModel
from sandbatch.testing.template import logprob
from sandbatch.core.util import iter_jsonl

SCRIPT = {"tasks": {"inst-1": [
    {"reasoning_content": "Look around first.", "content": "Listing files.",
     "tool_calls": [{"name": "Bash", "arguments": {"command": "ls -1", "description": "List"}}]},
    {"content": "The fix is in."},
]}}

BASH = {"name": "Bash", "description": "Run a command", "cache_control": {"type": "ephemeral"},
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"},
                                                          "description": {"type": "string"}}}}
SYSTEM = [{"type": "text", "text": "You are an agent."},
          {"type": "text", "text": "Work in the repository.", "cache_control": {"type": "ephemeral"}}]
FIRST = {"role": "user", "content": [{"type": "text", "text": "Please solve inst-1 now.",
                                      "cache_control": {"type": "ephemeral"}}]}


@pytest.fixture
def scripted(tmp_path):
    model = ScriptedModel(Script.from_dict(copy.deepcopy(SCRIPT)))
    server = model.serve()
    model.url = f"http://127.0.0.1:{server.port}/v1"
    yield model
    server.stop()


def proxy(upstream: str, path, **settings) -> ModelProxy:
    return ModelProxy(settings, upstream, None, path, tokens="on", agent_key="sbx-key")


def client(p: ModelProxy) -> anthropic.Anthropic:
    # the base URL as Claude Code is given it (no /v1: the client adds /v1/messages)
    return anthropic.Anthropic(base_url=p.url_for("127.0.0.1")[:-3], api_key="sbx-key", max_retries=0)


def ask(c: anthropic.Anthropic, messages, **kw):
    return c.messages.create(model="agent-model", max_tokens=1024, system=SYSTEM, tools=[BASH],
                             messages=messages, thinking={"type": "enabled", "budget_tokens": 512}, **kw)


def test_a_tool_turn_and_its_answer_with_anthropics_client(scripted, tmp_path):
    path = tmp_path / "model_calls.jsonl"
    with proxy(scripted.url, path) as p:
        c = client(p)
        first = ask(c, [FIRST])
        assert [b.type for b in first.content] == ["thinking", "text", "tool_use"]
        thinking, text, call = first.content
        assert (thinking.thinking, text.text) == ("Look around first.", "Listing files.")
        assert (call.id, call.name, call.input) == ("call_0_0", "Bash", {"command": "ls -1", "description": "List"})
        assert first.stop_reason == "tool_use" and first.role == "assistant" and first.model == "agent-model"
        reply = scripted.reply(scripted.requests[0]["body"])
        assert (first.usage.input_tokens, first.usage.output_tokens) == (reply.prompt_tokens, reply.completion_tokens)
        # the history as Claude Code sends it back: the thinking, the call, its result and a note
        second = ask(c, [FIRST, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                         {"role": "user", "content": [
                             {"type": "tool_result", "tool_use_id": "call_0_0", "content": [{"type": "text", "text": "a.py"}]},
                             {"type": "text", "text": "Keep going."}]}])
        assert [(b.type, b.text) for b in second.content] == [("text", "The fix is in.")]
        assert second.stop_reason == "end_turn"
        assert second.id != first.id  # Claude Code merges answers with one id into one turn
    sent = [r["body"] for r in scripted.requests]
    assert all(r["path"] == "/v1/chat/completions" for r in scripted.requests)
    assert sent[0]["messages"] == [{"role": "system", "content": "You are an agent.\nWork in the repository."},
                                   {"role": "user", "content": "Please solve inst-1 now."}]
    assert sent[0]["tools"] == [{"type": "function", "function": {"name": "Bash", "description": "Run a command",
                                                                  "parameters": BASH["input_schema"]}}]
    assert sent[0]["max_tokens"] == 1024 and sent[0]["stream"] is False and "thinking" not in sent[0]
    assert sent[0]["return_token_ids"] is True and sent[0]["logprobs"] is True  # model.tokens: on
    assert sent[1]["messages"][2:] == [
        {"role": "assistant", "content": "Listing files.", "reasoning_content": "Look around first.",
         "tool_calls": [{"id": "call_0_0", "type": "function",
                         "function": {"name": "Bash", "arguments": json.dumps(call.input)}}]},
        {"role": "tool", "tool_call_id": "call_0_0", "content": "a.py"},
        {"role": "user", "content": "Keep going."}]
    assert "cache_control" not in json.dumps(sent)
    # recorded as Chat calls are: token ids, logprobs and what each produced, for the token join
    rows = list(iter_jsonl(path))
    assert [(r["endpoint"], r["call"], r["status"], r["upstream_endpoint"]) for r in rows] == \
        [("messages", 1, 200, "chat"), ("messages", 2, 200, "chat")]
    generated = [i for _, i in reply.generated()]
    assert rows[0]["tokens"]["generation"] == generated
    assert rows[0]["tokens"]["logprobs"] == [logprob(i) for i in generated]
    assert rows[0]["tokens"]["prompt"]["ids"] == reply.prompt_ids
    assert rows[1]["tokens"]["extends"] is True  # the translated history re-renders the first turn exactly
    assert rows[0]["output"]["calls"] == [["call_0_0", "Bash", arguments_digest(call.input)]]
    assert rows[0]["thinking_dropped"] is True


def test_streaming_sends_the_event_sequence(scripted, tmp_path):
    with proxy(scripted.url, tmp_path / "calls.jsonl") as p:
        c = client(p)
        with c.messages.stream(model="agent-model", max_tokens=256, system=SYSTEM, tools=[BASH],
                               messages=[FIRST]) as stream:
            kinds = [event.type for event in stream]
            final = stream.get_final_message()
        raw = httpx.post(p.url_for("127.0.0.1") + "/messages", headers={"x-api-key": "sbx-key"},
                         json={"model": "m", "max_tokens": 9, "stream": True, "messages": [FIRST]})
    # the SDK's own events (it adds text/input_json convenience events between the raw ones)
    assert [k for k in kinds if k in ("message_start", "content_block_start", "content_block_stop",
                                      "message_delta", "message_stop")] == \
        ["message_start"] + ["content_block_start", "content_block_stop"] * 3 + ["message_delta", "message_stop"]
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[2].input == {"command": "ls -1", "description": "List"} and final.stop_reason == "tool_use"
    assert raw.headers["content-type"].startswith("text/event-stream")
    events = [line[7:] for line in raw.text.splitlines() if line.startswith("event: ")]
    block = ["content_block_start", "content_block_delta", "content_block_stop"]
    # thinking (its text, then its signature), text, tool_use; a block's deltas as the chunks came
    assert squeezed(events) == ["message_start", *block * 3, "message_delta", "message_stop"]
    data = [json.loads(line[6:]) for line in raw.text.splitlines() if line.startswith("data: ")]
    assert [d["type"] for d in data] == events
    assert squeezed([d["delta"]["type"] for d in data if d["type"] == "content_block_delta"]) == \
        ["thinking_delta", "signature_delta", "text_delta", "input_json_delta"]
    assert data[-2]["usage"]["output_tokens"] == final.usage.output_tokens > 0


def squeezed(kinds: list[str]) -> list[str]:
    """`kinds` with each run of one kind written once."""
    return [k for n, k in enumerate(kinds) if n == 0 or kinds[n - 1] != k]


def test_streamed_answers_go_out_as_the_upstream_sends_them(tmp_path):
    """The upstream sends the rest of its answer only once the client has the first text: a
    proxy that waited for the whole answer would hold it until the upstream's wait ran out."""
    from test_proxy import Scripted, released_within, sse

    released, waited = threading.Event(), []

    async def held_stream(request):
        async def chunks():
            yield b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}\n\n'
            waited.append(await released_within(released, 60))
            yield b'data: {"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}\n\n'
            yield b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}\n\n'
            yield b"data: [DONE]\n\n"
        return await sse(request, chunks())

    upstream = Scripted([held_stream])
    upstream.start()
    try:
        with proxy(upstream.url, tmp_path / "calls.jsonl") as p:
            with client(p).messages.stream(model="agent-model", max_tokens=64, messages=[FIRST]) as stream:
                for event in stream:
                    if event.type == "text":
                        released.set()
                final = stream.get_final_message()
    finally:
        upstream.stop()
    assert waited == [True], "the first text reached the client only after the upstream gave up waiting"
    assert [b.text for b in final.content] == ["Hello"] and final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 2
    (row,) = iter_jsonl(tmp_path / "calls.jsonl")
    assert (row["endpoint"], row["upstream_endpoint"], row["usage"]["total_tokens"]) == ("messages", "chat", 9)


def test_count_tokens_is_answered_and_not_a_model_call(scripted, tmp_path):
    path = tmp_path / "calls.jsonl"
    with proxy(scripted.url, path) as p:
        counted = client(p).messages.count_tokens(model="agent-model", system=SYSTEM, tools=[BASH], messages=[FIRST])
        assert p.stats["calls"] == 0
    assert counted.input_tokens == messages_api.count_tokens({"system": SYSTEM, "tools": [BASH], "messages": [FIRST]})
    assert counted.input_tokens > 20
    assert scripted.requests == []
    (row,) = iter_jsonl(path)
    assert (row["endpoint"], row["status"], row["input_tokens"]) == ("count_tokens", 200, counted.input_tokens)
    assert row["counted_by"] == "estimate"


def test_count_tokens_asks_the_upstreams_tokenizer_when_configured(scripted, tmp_path):
    """With model.proxy.tokenize_url the count is the upstream's own (vLLM's /tokenize, which
    the scripted model serves with its chat template); a failing endpoint leaves the estimate."""
    from sandbatch.testing.template import render_prompt

    path = tmp_path / "calls.jsonl"
    root = scripted.url[:-3]  # vLLM serves /tokenize at its root, not under /v1
    history = [FIRST, {"role": "assistant", "content": [{"type": "text", "text": "Looking."}]},
               {"role": "user", "content": "Go on."}]
    with proxy(scripted.url, path, tokenize_url=root + "/tokenize") as p:
        counted = client(p).messages.count_tokens(model="agent-model", system=SYSTEM, tools=[BASH], messages=history)
    with proxy(scripted.url, tmp_path / "failing.jsonl", tokenize_url=root + "/no-tokenizer") as p:
        estimated = client(p).messages.count_tokens(model="agent-model", system=SYSTEM, messages=history)
    chat, _ = messages_api.to_chat({"system": SYSTEM, "messages": history})
    assert counted.input_tokens == len(render_prompt(chat["messages"])) != messages_api.count_tokens(
        {"system": SYSTEM, "tools": [BASH], "messages": history})
    asked = [r for r in scripted.requests if r["path"] == "/tokenize"]
    assert asked[0]["body"]["messages"] == chat["messages"] and asked[0]["body"]["add_generation_prompt"] is True
    assert asked[0]["body"]["tools"][0]["function"]["name"] == "Bash"
    (row,) = iter_jsonl(path)
    assert (row["counted_by"], row["input_tokens"]) == ("tokenize", counted.input_tokens)
    (row,) = iter_jsonl(tmp_path / "failing.jsonl")
    assert row["counted_by"] == "estimate" and row["tokenize_error"].startswith("HTTP 404")
    assert estimated.input_tokens == messages_api.count_tokens({"system": SYSTEM, "messages": history})
    assert not [r for r in scripted.requests if r["path"].endswith("/messages")]  # no model call made


def test_errors_come_in_anthropics_shape(scripted, tmp_path):
    with proxy(scripted.url, tmp_path / "calls.jsonl", max_calls=1) as p:
        c = client(p)
        ask(c, [FIRST])
        with pytest.raises(anthropic.BadRequestError) as refused:
            ask(c, [FIRST])
        with pytest.raises(anthropic.AuthenticationError) as unauthorized:
            anthropic.Anthropic(base_url=p.url_for("127.0.0.1")[:-3], api_key="wrong",
                                max_retries=0).messages.create(model="m", max_tokens=5, messages=[FIRST])
    assert refused.value.body["type"] == "error" and "model.proxy.max_calls = 1" in refused.value.message
    assert refused.value.body["error"]["type"] == "invalid_request_error"
    assert unauthorized.value.body["error"]["type"] == "authentication_error"


def test_upstream_errors_are_translated(tmp_path):
    from aiohttp import web
    from sandbatch.proxy.server import ServerThread, catch_all

    async def failing(request):
        return web.json_response({"error": {"message": "context too long", "type": "BadRequestError"}}, status=400)

    server = ServerThread(catch_all(failing))
    server.start()
    try:
        with proxy(f"http://127.0.0.1:{server.port}/v1", tmp_path / "calls.jsonl") as p:
            with pytest.raises(anthropic.BadRequestError) as failed:
                ask(client(p), [FIRST])
    finally:
        server.stop()
    assert failed.value.body == {"type": "error", "error": {"type": "invalid_request_error",
                                                             "message": "context too long"}}


def test_passthrough_to_an_upstream_serving_messages(scripted, tmp_path):
    # the upstream that serves Messages: a second proxy, translating for the scripted model
    with proxy(scripted.url, tmp_path / "inner.jsonl", require_agent_key=False) as inner, \
            ModelProxy({"messages": "passthrough"}, inner.url_for("127.0.0.1"), "sk-upstream",
                       tmp_path / "outer.jsonl", agent_key="sbx-key") as outer:
        c = client(outer)
        answer = ask(c, [FIRST])
        with c.messages.stream(model="agent-model", max_tokens=64, messages=[FIRST], tools=[BASH]) as stream:
            streamed = stream.get_final_message()
        counted = c.messages.count_tokens(model="agent-model", messages=[FIRST])
    assert [b.type for b in answer.content] == [b.type for b in streamed.content] == ["thinking", "text", "tool_use"]
    outer_rows, inner_rows = list(iter_jsonl(tmp_path / "outer.jsonl")), list(iter_jsonl(tmp_path / "inner.jsonl"))
    assert [(r["endpoint"], r["status"], r.get("upstream_endpoint")) for r in outer_rows] == \
        [("messages", 200, None)] * 2 + [("count_tokens", 200, None)]
    assert [r["path"] for r in inner_rows] == ["/v1/messages"] * 2 + ["/v1/messages/count_tokens"]  # sent on
    assert counted.input_tokens == inner_rows[-1]["input_tokens"]  # the upstream's count
    assert outer_rows[0]["usage"]["completion_tokens"] > 0
    assert outer_rows[0]["cache_control_dropped"] == 2  # the tool's and the user message's
