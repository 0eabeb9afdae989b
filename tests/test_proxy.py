"""The model proxy and the scripted model, over real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import copy
import json
import re
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from sandbatch.core.config import parse
from services import need_program
from sandbatch.proxy import ModelProxy, drop_cache_control, proxy_settings, split_path
from sandbatch.proxy.upstream import retry_after
from sandbatch.sandbox import proxy_address
from sandbatch.proxy import server as http_server
from sandbatch.proxy.server import ServerThread, catch_all
from sandbatch.testing.scripted_model import Script, ScriptedModel
from sandbatch.testing.template import assistant_turns
from sandbatch.core.errors import InfraError, UserError
from sandbatch.contracts.model_calls import normalize_usage
from sandbatch.rollout.usage import summarize, summarize_usage
from sandbatch.core.util import backoff_delay, iter_jsonl

SCRIPT = {
    "tasks": {
        "inst-1": [
            {"reasoning_content": "Look around first.", "content": "Listing files.",
             "tool_calls": [{"name": "bash", "arguments": {"command": "ls -1"}}]},
            {"tool_calls": [{"name": "edit", "arguments": {"path": "a.py", "old": "1", "new": "2"}},
                            {"name": "bash", "arguments": {"command": "pytest -q"}}]},
            {"content": "The fix is in."},
        ],
        "re:repair the (lexer|parser)": {"turns": [{"content": "regex matched"}],
                                         "final": {"content": "regex task over"}},
    },
    "final": {"tool_calls": [{"name": "bash", "arguments": {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}]},
    "fallbacks": {"bash": [{"name": "shell", "rename": {"command": "cmd"}}, "terminal"]},
    "title": "Fix inst-1",
}

BASH_TOOL = {"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
SHELL_TOOL = {"type": "function", "function": {"name": "shell", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}}}}


def chat_body(text: str = "Please solve inst-1 now.", history=(), tools=(BASH_TOOL,), **extra):
    return {"model": "agent-model", "messages": [{"role": "system", "content": "You are an agent."},
                                                {"role": "user", "content": text}, *history],
            "tools": list(tools), **extra}


@pytest.fixture
def scripted(tmp_path):
    model = ScriptedModel(Script.from_dict(copy.deepcopy(SCRIPT)), tmp_path / "upstream" / "requests.jsonl")
    server = model.serve()
    model.url = f"http://127.0.0.1:{server.port}/v1"
    yield model
    server.stop()


@pytest.fixture
def out(tmp_path):
    return tmp_path / "out"


def calls(out: Path) -> list[dict]:
    return list(iter_jsonl(out / "model_calls.jsonl"))


def proxy(upstream: str, out: Path, settings=None, **kw) -> ModelProxy:
    """A proxy that takes requests without the agent key (tested on its own below)."""
    settings = {"require_agent_key": False, **(settings or {})}
    return ModelProxy(settings, upstream, kw.pop("api_key", None), out / "model_calls.jsonl", **kw)


async def sse(request, chunks):
    """Send the async iterable `chunks` as an event stream."""
    out = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await out.prepare(request)
    async for chunk in chunks:
        await out.write(chunk)
    await out.write_eof()
    return out


class Scripted(ServerThread):
    """A tiny upstream whose answers come from a list of (status, headers, body) or callables."""

    def __init__(self, answers, default=None):
        self.answers = list(answers)
        self.default = default or (200, {}, {"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                                          "finish_reason": "stop"}],
                                            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})
        self.hits: list[float] = []
        super().__init__(catch_all(self.handle), name="test-upstream")

    async def handle(self, request):
        self.hits.append(time.monotonic())
        answer = self.answers.pop(0) if self.answers else self.default
        if callable(answer):
            return await answer(request)
        status, headers, body = answer
        return web.json_response(body, status=status, headers=headers)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture
def upstream():
    servers = []

    def make(answers, default=None):
        server = Scripted(answers, default)
        server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


# --- forwarding -------------------------------------------------------------------------

def test_forwards_chat_responses_and_models(scripted, out):
    with proxy(scripted.url, out) as p:
        base = p.url_for("127.0.0.1")
        assert base == f"http://127.0.0.1:{p.port}/v1"
        r = httpx.post(f"{base}/chat/completions", json=chat_body())
        assert r.status_code == 200
        msg = r.json()["choices"][0]["message"]
        assert msg["content"] == "Listing files." and msg["reasoning_content"] == "Look around first."
        assert msg["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"command": "ls -1"}'}

        r = httpx.post(f"{base}/responses", json={"model": "m", "input": "solve inst-1", "tools": [
            {"type": "function", "name": "bash", "parameters": {}}]})
        assert r.status_code == 200
        assert [i["type"] for i in r.json()["output"]] == ["reasoning", "message", "function_call"]

        assert httpx.get(f"{base}/models").json()["data"][0]["id"] == "scripted"
        # without /v1 and with it doubled, the upstream still gets <base_url>/chat/completions
        root = base[: -len("/v1")]
        assert httpx.post(f"{root}/chat/completions", json=chat_body()).status_code == 200
        assert httpx.post(f"{root}/v1/v1/chat/completions", json=chat_body()).status_code == 200
    assert [r["path"] for r in scripted.requests] == ["/v1/chat/completions", "/v1/responses", "/v1/models",
                                                       "/v1/chat/completions", "/v1/chat/completions"]
    rows = calls(out)
    assert [r["endpoint"] for r in rows] == ["chat", "responses", "models", "chat", "chat"]
    assert all(r["status"] == 200 and r["attempts"] == 1 for r in rows)
    assert rows[0]["usage"]["total_tokens"] > 0 and rows[1]["usage"]["reasoning_tokens"] > 0


def test_split_path():
    assert split_path("/v1/chat/completions") == ("chat", "/chat/completions")
    assert split_path("/chat/completions/") == ("chat", "/chat/completions")
    assert split_path("/v1/v1/responses") == ("responses", "/responses")
    assert split_path("/v1/models/abc") == ("models", "/models/abc")
    assert split_path("/v1/embeddings") == ("other", "/embeddings")


def test_cache_control_dropped_only_where_clients_attach_it(scripted, out):
    schema = {"type": "object", "properties": {
        "cache_control": {"type": "object", "properties": {"type": {"type": "string"}}},
        "command": {"type": "string"}}}
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}]},
            {"role": "user", "content": "solve inst-1"},
            {"role": "user", "content": [{"type": "text", "text": "more"},
                                         {"type": "text", "text": "last", "cache_control": {"type": "ephemeral"}}]},
        ],
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": schema},
                   "cache_control": {"type": "ephemeral"}}],
    }
    expected = copy.deepcopy(body)
    del expected["messages"][0]["content"][0]["cache_control"]
    del expected["messages"][2]["content"][1]["cache_control"]
    del expected["tools"][0]["cache_control"]
    with proxy(scripted.url, out) as p:
        assert httpx.post(p.url_for("127.0.0.1") + "/chat/completions", json=body).status_code == 200
    received = scripted.requests[0]["body"]
    assert received == expected
    assert "cache_control" in received["tools"][0]["function"]["parameters"]["properties"]
    assert calls(out)[0]["cache_control_dropped"] == 3
    # the same rule as a pure function, and the switch that turns it off
    again = copy.deepcopy(body)
    assert drop_cache_control(again) == 3 and again == expected


def test_cache_control_kept_when_switched_off(scripted, out):
    body = chat_body(tools=[dict(BASH_TOOL, cache_control={"type": "ephemeral"})])
    with proxy(scripted.url, out, {"drop_cache_control": False}) as p:
        httpx.post(p.url_for("127.0.0.1") + "/chat/completions", json=body)
    assert scripted.requests[0]["body"]["tools"][0]["cache_control"] == {"type": "ephemeral"}


def test_sampling_overrides_win(scripted, out):
    sampling = {"temperature": 0.2, "top_p": 0.9, "max_tokens": 128,
                "chat_template_kwargs": {"enable_thinking": False}}
    settings = {"extra_body": {"seed": 7, "top_k": None, "logit_bias": {"1": -1}}, "force_model_name": True}
    with proxy(scripted.url, out, settings, sampling=sampling, model_name="served-model") as p:
        base = p.url_for("127.0.0.1")
        httpx.post(f"{base}/chat/completions", json=chat_body(
            temperature=1.0, top_k=40, max_completion_tokens=50,
            chat_template_kwargs={"enable_thinking": True, "keep": 1}))
        httpx.post(f"{base}/chat/completions", json=chat_body(max_tokens=9000))
        httpx.post(f"{base}/responses", json={"model": "m", "input": "solve inst-1", "max_output_tokens": 5,
                                               "temperature": 1.5})
    chat1, chat2, resp = (r["body"] for r in scripted.requests)
    assert chat1["temperature"] == 0.2 and chat1["top_p"] == 0.9 and chat1["seed"] == 7
    assert chat1["max_completion_tokens"] == 128 and "max_tokens" not in chat1  # the key the agent used
    assert chat1["chat_template_kwargs"] == {"enable_thinking": False, "keep": 1}
    assert "top_k" not in chat1 and chat1["logit_bias"] == {"1": -1}
    assert chat1["model"] == chat2["model"] == resp["model"] == "served-model"
    assert chat2["max_tokens"] == 128 and "max_completion_tokens" not in chat2
    assert resp["max_output_tokens"] == 128 and "max_tokens" not in resp and resp["temperature"] == 0.2


# --- retries and failures -----------------------------------------------------------------

# an answer that comes after retries, backoffs or a timeout: httpx's own 5 s default would cut it
# off first on a loaded machine (each test bounds the time it expects itself)
SLOW_ANSWER = 60

def test_retries_429_with_retry_after_then_502_503(upstream, out):
    up = upstream([(429, {"retry-after": "2"}, {"error": {"message": "slow down"}}),
                   (502, {}, {"error": {"message": "bad gateway"}}),
                   (503, {}, {"error": {"message": "unavailable"}})])
    with proxy(up.url, out, {"retries": 5, "backoff": 0.01}) as p:
        t0 = time.monotonic()
        r = httpx.post(p.url_for("127.0.0.1") + "/chat/completions", json=chat_body(), timeout=SLOW_ANSWER)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "ok"
    assert len(up.hits) == 4
    assert up.hits[1] - up.hits[0] >= 1.99  # Retry-After honoured
    # the others back off briefly (0.01 s, 0.02 s), not as long as the Retry-After before them: what
    # the bound tells apart is 0.03 s from 2 x 2 s, with room for a loaded machine's slow attempts
    assert up.hits[3] - up.hits[1] < 3.5
    row = calls(out)[0]
    assert row["attempts"] == 4 and row["attempt_statuses"] == [429, 502, 503, 200] and row["status"] == 200
    assert time.monotonic() - t0 < 30


def test_retries_stop_and_the_agent_sees_the_upstream_status(upstream, out):
    up = upstream([], default=(503, {}, {"error": {"message": "still down"}}))
    with proxy(up.url, out, {"retries": 2, "backoff": 0.01}) as p:
        r = httpx.post(p.url_for("127.0.0.1") + "/chat/completions", json=chat_body(), timeout=SLOW_ANSWER)
    assert r.status_code == 503 and r.json()["error"]["message"] == "still down"
    assert len(up.hits) == 3
    row = calls(out)[0]
    assert row["status"] == 503 and row["attempts"] == 3 and row["error"] == "still down"


def test_retry_after_beyond_the_budget_returns_the_429(upstream, out):
    up = upstream([(429, {"retry-after": "300"}, {"error": {"message": "later"}})])
    with proxy(up.url, out, {"retries": 5, "retry_budget": 1}) as p:
        t0 = time.monotonic()
        r = httpx.post(p.url_for("127.0.0.1") + "/chat/completions", json=chat_body(), timeout=SLOW_ANSWER)
    # answered at once, not after the 300 s asked for (the bound only tells the two apart)
    assert r.status_code == 429 and time.monotonic() - t0 < 60
    assert len(up.hits) == 1


def test_no_retry_on_other_errors(upstream, out):
    up = upstream([(400, {}, {"error": {"message": "bad field"}})])
    with proxy(up.url, out, {"retries": 5, "backoff": 0.01}) as p:
        r = httpx.post(p.url_for("127.0.0.1") + "/chat/completions", json=chat_body())
    assert r.status_code == 400 and len(up.hits) == 1
    assert calls(out)[0]["error"] == "bad field"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_upstream_errors_within_the_bound(out):
    settings = {"retries": 50, "backoff": 0.05, "backoff_max": 0.2, "retry_budget": 1.0, "connect_timeout": 0.5}
    with proxy(f"http://127.0.0.1:{_closed_port()}/v1", out, settings) as p:
        t0 = time.monotonic()
        r = httpx.post(p.url_for("127.0.0.1") + "/chat/completions", json=chat_body(), timeout=SLOW_ANSWER)
        elapsed = time.monotonic() - t0
    assert r.status_code == 502
    err = r.json()["error"]
    assert err["code"] == "upstream_unreachable" and "not reachable" in err["message"]
    # spent the 1 s budget, then stopped: 50 retries would take over 10 s of backoff alone
    assert 0.5 < elapsed < 8
    row = calls(out)[0]
    assert row["status"] == 502 and row["attempts"] > 3 and "ClientConnectorError" in row["error"]
    assert summarize_usage(out / "model_calls.jsonl").failed_calls == 1


def test_read_timeout_is_not_retried(upstream, out):
    async def silent(request):
        await asyncio.sleep(60)
        return web.json_response({})

    up = upstream([silent])
    with proxy(up.url, out, {"read_timeout": 0.3, "retries": 3, "backoff": 0.01}) as p:
        t0 = time.monotonic()
        r = httpx.post(p.url_for("127.0.0.1") + "/chat/completions", json=chat_body(), timeout=SLOW_ANSWER)
    # the 0.3 s read timeout ended it, not the upstream's answer after 60 s
    assert r.status_code == 504 and time.monotonic() - t0 < 30
    assert len(up.hits) == 1 and calls(out)[0]["status"] == 504


# --- streaming ----------------------------------------------------------------------------

def test_streaming_is_passed_through_byte_for_byte(scripted, out):
    body = chat_body(stream=True, stream_options={"include_usage": True})
    direct = httpx.post(scripted.url + "/chat/completions", json=body).content
    with proxy(scripted.url, out) as p:
        with httpx.stream("POST", p.url_for("127.0.0.1") + "/chat/completions", json=body) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            relayed = b"".join(r.iter_bytes())
        resp_body = {"model": "m", "input": "solve inst-1", "stream": True}
        events = httpx.post(p.url_for("127.0.0.1") + "/responses", json=resp_body).text
    assert relayed == direct
    # reassembling the streamed tool call gives the non-streamed one
    args = "".join(
        tc["function"].get("arguments", "")
        for line in relayed.decode().splitlines() if line.startswith("data: {")
        for ch in json.loads(line[6:])["choices"] for tc in ch["delta"].get("tool_calls", []))
    assert json.loads(args) == {"command": "ls -1"}
    chat_row, resp_row = calls(out)
    final = json.loads([x for x in relayed.decode().split("\n\n") if '"usage"' in x][-1][6:])["usage"]
    assert chat_row["stream"] is True and chat_row["usage"] == normalize_usage(final)
    assert chat_row["first_byte_s"] <= chat_row["latency_s"]
    completed = json.loads([x for x in events.split("\n\n") if "response.completed" in x][0].split("data: ", 1)[1])
    assert resp_row["usage"] == normalize_usage(completed["response"]["usage"]) and resp_row["usage"]["total_tokens"]


def test_streamed_chat_gets_usage_requested(scripted, out):
    with proxy(scripted.url, out) as p:
        text = httpx.post(p.url_for("127.0.0.1") + "/chat/completions", json=chat_body(stream=True)).text
    assert scripted.requests[0]["body"]["stream_options"] == {"include_usage": True}
    assert '"usage"' in text and calls(out)[0]["usage"]["total_tokens"] > 0


async def released_within(event: threading.Event, seconds: float) -> bool:
    """Whether the test sets `event` within `seconds` (polled: no thread of its own)."""
    deadline = time.monotonic() + seconds
    while not event.is_set() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return event.is_set()


def test_stream_chunks_are_not_buffered(upstream, out):
    """The upstream sends its second chunk only once the agent has the first: a proxy that
    buffered would hold the first until the upstream's wait ran out."""
    released, waited = threading.Event(), []

    async def held_stream(request):
        async def chunks():
            yield b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
            waited.append(await released_within(released, 60))
            yield b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":1,"total_tokens":5}}\n\n'
            yield b"data: [DONE]\n\n"
        return await sse(request, chunks())

    up = upstream([held_stream])
    with proxy(up.url, out) as p:
        seen = []
        with httpx.stream("POST", p.url_for("127.0.0.1") + "/chat/completions", json=chat_body(stream=True)) as r:
            for chunk in r.iter_raw():
                seen.append(chunk)
                released.set()
    assert b'"content":"a"' in seen[0] and b'"usage"' not in seen[0]
    assert waited == [True], "the first chunk reached the agent only after the upstream gave up waiting"
    assert calls(out)[0]["usage"] == {"prompt_tokens": 4, "completion_tokens": 1, "reasoning_tokens": 0,
                                      "cached_tokens": 0, "total_tokens": 5}


def test_agent_closing_a_stream_early_is_recorded(upstream, out):
    async def endless(request):
        async def chunks():
            for _ in range(50):
                yield b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
                await asyncio.sleep(0.05)
        return await sse(request, chunks())

    up = upstream([endless])
    with proxy(up.url, out) as p:
        with httpx.stream("POST", p.url_for("127.0.0.1") + "/chat/completions", json=chat_body(stream=True)) as r:
            next(r.iter_raw())
        # the proxy notices the close at the upstream's next chunk (0.05 s); the bound is the
        # upstream's whole stream (2.5 s) with room for a loaded machine
        log, deadline = out / "model_calls.jsonl", time.monotonic() + 30
        while not (log.is_file() and log.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert log.is_file() and log.read_text(), "no call recorded within 30 s after the agent closed the stream"
    row = calls(out)[0]
    assert row["error"] == "the agent closed the stream early" and row["response_bytes"] < 50 * 60


# --- caps -------------------------------------------------------------------------------

def test_max_calls_cap_answers_with_a_clear_error(scripted, out):
    with proxy(scripted.url, out, {"max_calls": 2}) as p:
        base = p.url_for("127.0.0.1")
        codes = [httpx.post(f"{base}/chat/completions", json=chat_body()).status_code for _ in range(2)]
        refused = httpx.post(f"{base}/chat/completions", json=chat_body())
        assert p.stats["cap_hit"] == "max_calls" and p.stats["calls"] == 2 and p.stats["refused"] == 1
    assert codes == [200, 200] and refused.status_code == 400
    err = refused.json()["error"]
    assert err["code"] == "max_calls_exceeded" and "model.proxy.max_calls = 2" in err["message"]
    assert len(scripted.requests) == 2  # the refused call never reached the upstream
    assert calls(out)[-1]["refused"] == "max_calls"


def test_max_tokens_cap(scripted, out):
    with proxy(scripted.url, out, {"max_tokens": 10, "cap_status": 429}) as p:
        base = p.url_for("127.0.0.1")
        assert httpx.post(f"{base}/chat/completions", json=chat_body()).status_code == 200
        refused = httpx.post(f"{base}/responses", json={"model": "m", "input": "solve inst-1"})
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "max_tokens_exceeded"
    assert "model.proxy.max_tokens = 10" in refused.json()["error"]["message"]
    assert len(scripted.requests) == 1


# --- secrets ------------------------------------------------------------------------------

def test_api_key_reaches_upstream_and_no_file(scripted, tmp_path, monkeypatch):
    secret = "sk-test-8c1f0e5d9a7b4c2e"
    monkeypatch.setenv("SANDBATCH_TEST_UPSTREAM_KEY", secret)
    cfg = parse({"model": {"base_url": scripted.url, "name": "m", "api_key_env": "SANDBATCH_TEST_UPSTREAM_KEY"}})
    out = tmp_path / "out"
    with ModelProxy.from_config(cfg.model, out / "model_calls.jsonl") as p:
        base = p.url_for("127.0.0.1")
        headers = {"authorization": f"Bearer {p.agent_key}"}
        httpx.post(f"{base}/chat/completions", json=chat_body(), headers=headers)
        httpx.post(f"{base}/chat/completions", json=chat_body(stream=True), headers=headers)
        httpx.get(f"{base}/models", headers=headers)
    assert {r["headers"]["authorization"] for r in scripted.requests} == {f"Bearer {secret}"}
    files = [f for f in out.rglob("*") if f.is_file()]
    assert files and all(secret.encode() not in f.read_bytes() for f in files)


def test_requests_without_the_agent_key_are_refused(scripted, out):
    with ModelProxy({}, scripted.url, None, out / "model_calls.jsonl", agent_key="rollout-key") as p:
        url = p.url_for("127.0.0.1") + "/chat/completions"
        assert httpx.post(url, json=chat_body()).status_code == 401
        wrong = httpx.post(url, json=chat_body(), headers={"authorization": "Bearer other"})
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
        assert httpx.post(url, json=chat_body(), headers={"authorization": "Bearer rollout-key"}).status_code == 200
        assert httpx.post(url, json=chat_body(), headers={"x-api-key": "rollout-key"}).status_code == 200
        assert httpx.get(p.url_for("127.0.0.1") + "/models").status_code == 401
    assert len(scripted.requests) == 2
    assert [r["status"] for r in calls(out)] == [401, 401, 200, 200, 401]
    assert ModelProxy({}, scripted.url, None, out / "x.jsonl").agent_key != ModelProxy(
        {}, scripted.url, None, out / "x.jsonl").agent_key  # fresh per proxy


def test_env_proxy_is_looked_up_once_and_honours_no_proxy(monkeypatch):
    from sandbatch.proxy.upstream import env_proxy as _env_proxy

    monkeypatch.setenv("http_proxy", "http://egress.example:3128")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    assert _env_proxy("http://127.0.0.1:8000/v1") is None
    assert _env_proxy("http://model.example/v1") == "http://egress.example:3128"
    assert _env_proxy("https://model.example/v1") is None  # no https_proxy set


def test_missing_api_key_env_is_a_user_error(monkeypatch):
    monkeypatch.delenv("SANDBATCH_NOT_SET", raising=False)
    cfg = parse({"model": {"base_url": "http://127.0.0.1:1/v1", "api_key_env": "SANDBATCH_NOT_SET"}})
    with pytest.raises(UserError, match="SANDBATCH_NOT_SET is not set"):
        ModelProxy.from_config(cfg.model, "/nonexistent/model_calls.jsonl")


# --- usage ------------------------------------------------------------------------------

def test_summarize_usage_sums_the_records(scripted, out):
    with proxy(scripted.url, out, {"max_calls": 4}) as p:
        base = p.url_for("127.0.0.1")
        httpx.post(f"{base}/chat/completions", json=chat_body())
        httpx.post(f"{base}/chat/completions", json=chat_body(stream=True))
        httpx.post(f"{base}/responses", json={"model": "m", "input": "solve inst-1"})
        httpx.post(f"{base}/responses", json={"model": "m", "input": "solve inst-1", "stream": True})
        httpx.get(f"{base}/models")
        httpx.post(f"{base}/chat/completions", json=chat_body())  # refused
    rows = calls(out)
    path = out / "model_calls.jsonl"
    with open(path, "a") as fh:
        fh.write('{"endpoint": "chat", "usage": {"prompt_')  # a killed job's half line
    total = summarize_usage(path)
    model_rows = [r for r in rows if r["endpoint"] != "models"]
    for key in ("prompt_tokens", "completion_tokens", "reasoning_tokens", "total_tokens"):
        assert getattr(total, key) == sum((r.get("usage") or {}).get(key, 0) for r in model_rows) > 0
    assert total.calls == 5 and total.refused_calls == 1 and total.failed_calls == 1
    assert total.other_requests == 1 and total.calls_without_usage == 0
    shaped = summarize(total)
    assert shaped.input_tokens == total.prompt_tokens and shaped.model_calls == 5
    assert summarize_usage(out / "missing.jsonl").calls == 0


def test_normalize_usage_both_shapes():
    chat = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
            "prompt_tokens_details": {"cached_tokens": 4}, "completion_tokens_details": {"reasoning_tokens": 2}}
    responses = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                 "input_tokens_details": {"cached_tokens": 4}, "output_tokens_details": {"reasoning_tokens": 2}}
    want = {"prompt_tokens": 10, "completion_tokens": 5, "reasoning_tokens": 2, "cached_tokens": 4, "total_tokens": 15}
    assert normalize_usage(chat) == normalize_usage(responses) == want
    assert normalize_usage({"prompt_tokens": 3, "completion_tokens": 1})["total_tokens"] == 4
    assert normalize_usage(None) is None


def test_retry_after_forms():
    assert retry_after({"retry-after": "2.5"}) == 2.5
    assert retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert 0 <= retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0
    assert retry_after({}) is None and retry_after({"retry-after": "soon"}) is None


# --- lifecycle ------------------------------------------------------------------------------

def test_async_context_does_not_block_the_callers_loop_and_stops_cleanly(upstream, out):
    """The upstream answers only once the caller's loop has ticked five times while the call is
    in flight: a proxy that blocked that loop would leave the upstream waiting out its 60 s."""
    ticked, answered = threading.Event(), []

    async def held(request):
        answered.append(await released_within(ticked, 60))
        return web.json_response({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})

    up = upstream([held])

    async def job():
        ticks = 0
        async with proxy(up.url, out) as p:
            async with httpx.AsyncClient(timeout=120) as client:
                call = asyncio.create_task(client.post(p.url_for("127.0.0.1") + "/chat/completions",
                                                       json=chat_body()))
                while not call.done():
                    ticks += 1
                    if ticks == 5:
                        ticked.set()
                    await asyncio.sleep(0.01)
                status = call.result().status_code
            port = p.port
        return status, port

    before = threading.active_count()
    status, port = asyncio.run(job())
    assert status == 200 and answered == [True]  # the loop kept running while the call was in flight
    assert threading.active_count() == before
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/v1/models")


def test_a_port_in_use_is_an_infra_error(out):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(InfraError, match="cannot listen on 127.0.0.1:"):
            proxy("http://127.0.0.1:1/v1", out, port=busy.getsockname()[1]).start()


def proxy_hosts(provider: str, settings: dict | None = None, service: str | None = None) -> tuple[str, str]:
    """sandbox.proxy_address for a provider, model.proxy settings (over the schema's defaults)
    and the sandbox service's address."""
    options = {"connection": {"domain": service}} if service is not None else {}
    sandbox = parse({"sandbox": {"provider": provider, provider: options}}).sandbox
    return proxy_address(sandbox, proxy_settings(settings))


def test_proxy_hosts_defaults_and_overrides():
    assert proxy_hosts("local") == ("127.0.0.1", "127.0.0.1")
    assert proxy_hosts("docker") == ("0.0.0.0", "host.docker.internal")
    assert proxy_hosts("docker", {"advertise_host": "172.17.0.1"}) == ("0.0.0.0", "172.17.0.1")
    assert proxy_hosts("docker", {"bind_host": "127.0.0.1"}) == ("127.0.0.1", "host.docker.internal")
    with pytest.raises(UserError, match="advertise_host: no default for sandbox provider 'opensandbox' and no route "):
        proxy_hosts("opensandbox", service="")  # a service whose address is not set
    with pytest.raises(UserError, match="unknown key 'retry'"):
        proxy_hosts("local", {"retry": 1})


def test_proxy_address_toward_a_sandbox_service_is_this_hosts_route_source():
    import ipaddress
    import socket

    # a service elsewhere: the source address of the route toward it (one of this host's)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("192.0.2.1", 9))
        off_host = sock.getsockname()[0]
    assert proxy_hosts("opensandbox", {}, "192.0.2.1:8080") == ("0.0.0.0", off_host)
    # a service on this host runs its sandboxes here: never the loopback address they cannot reach
    bind, advertise = proxy_hosts("opensandbox", {}, "127.0.0.1:18080")
    assert advertise == off_host and not ipaddress.ip_address(advertise).is_loopback
    assert proxy_hosts("opensandbox", {"advertise_host": "10.0.0.5"}, "127.0.0.1:18080")[1] == "10.0.0.5"
    with pytest.raises(UserError, match="advertise_host: .* no route toward no-such-host.invalid:8080"):
        proxy_hosts("opensandbox", {}, "no-such-host.invalid:8080")


def test_schema_defaults_fill_the_proxy_block():
    cfg = parse({})
    assert cfg.model.proxy.enabled is True and cfg.model.proxy.port == 0
    assert cfg.model.proxy.max_calls is None and cfg.model.proxy.extra_body == {}


# --- the scripted model ---------------------------------------------------------------------

def _assistant(msg):
    return {"role": "assistant", "content": msg.get("content"), "tool_calls": msg.get("tool_calls")}


def test_scripted_turns_follow_the_conversation(scripted):
    post = lambda body: httpx.post(scripted.url + "/chat/completions", json=body).json()["choices"][0]  # noqa: E731
    history = []
    names = []
    for _ in range(5):
        choice = post(chat_body(history=history, tools=[BASH_TOOL, {"type": "function", "function": {"name": "edit"}}]))
        msg = choice["message"]
        names.append([tc["function"]["name"] for tc in msg.get("tool_calls") or []] or msg["content"])
        history.append(_assistant(msg))
        for tc in msg.get("tool_calls") or []:
            history.append({"role": "tool", "tool_call_id": tc["id"], "content": "output"})
    assert names == [["bash"], ["edit", "bash"], "The fix is in.", ["bash"], ["bash"]]
    # after the script: the per-script final turn, here mini-swe-agent's submit command
    assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {
        "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}
    # a concurrent, different conversation starts at its own first turn (no server state)
    first = post(chat_body())
    assert first["message"]["content"] == "Listing files." and first["finish_reason"] == "tool_calls"


def test_scripted_tool_fallback_renames_arguments(scripted):
    r = httpx.post(scripted.url + "/chat/completions", json=chat_body(tools=[SHELL_TOOL])).json()
    call = r["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call == {"name": "shell", "arguments": '{"cmd": "ls -1"}'}
    terminal = {"type": "function", "function": {"name": "terminal"}}
    r = httpx.post(scripted.url + "/chat/completions", json=chat_body(tools=[terminal])).json()
    assert r["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "terminal"


def test_scripted_regex_task_title_and_unmatched(scripted):
    post = lambda body: httpx.post(scripted.url + "/chat/completions", json=body).json()["choices"][0]["message"]  # noqa: E731
    assert post(chat_body("Please repair the lexer."))["content"] == "regex matched"
    done = post(chat_body("Please repair the parser.", history=[{"role": "assistant", "content": "x"}]))
    assert done["content"] == "regex task over"
    title = post({"model": "small", "messages": [
        {"role": "system", "content": "You are a title generator. Output only a short title."},
        {"role": "user", "content": "Please solve inst-1 now."}]})
    assert title["content"] == "Fix inst-1" and not title.get("tool_calls")
    unmatched = post(chat_body("nothing scripted here"))
    assert unmatched["tool_calls"][0]["function"]["name"] == "bash"  # no default turns: the final turn


def test_scripted_responses_api_counts_turns_from_items(scripted):
    tools = [{"type": "function", "name": "bash", "parameters": {}}]
    items = [{"role": "user", "content": [{"type": "input_text", "text": "solve inst-1"}]},
             {"type": "reasoning", "summary": []},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Listing"}]},
             {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1", "output": "a.py"}]
    r = httpx.post(scripted.url + "/responses", json={"model": "m", "input": items, "tools": tools}).json()
    assert [(o["type"], o.get("name")) for o in r["output"]] == [("function_call", "edit"), ("function_call", "bash")]
    assert assistant_turns(items) == 1
    assert assistant_turns([{"role": "user"}, {"role": "assistant"}, {"role": "tool"}, {"role": "assistant"}]) == 2


def test_scripted_streams_match_non_streamed(scripted):
    body = {"model": "m", "input": "solve inst-1", "tools": [{"type": "function", "name": "bash"}]}
    plain = httpx.post(scripted.url + "/responses", json=body).json()
    text = httpx.post(scripted.url + "/responses", json=dict(body, stream=True)).text
    events = [json.loads(block.split("data: ", 1)[1]) for block in text.strip().split("\n\n")]
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"] == plain["output"]
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == "Listing files."
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


@pytest.mark.parametrize("command", ["console", "module"])
def test_scripted_model_cli(tmp_path, command):
    """Both ways the README names: the installed `sandbatch-scripted-model` and `python -m`."""
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    argv = ([str(Path(sys.executable).parent / "sandbatch-scripted-model")] if command == "console"
            else [sys.executable, "-m", "sandbatch.testing.scripted_model"])
    proc = subprocess.Popen([*argv, "--script", str(script), "--port", "0", "--record", str(tmp_path / "rec.jsonl")],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        url = line.strip().rsplit(" ", 1)[-1]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        r = httpx.post(url + "/chat/completions", json=chat_body())
        assert r.json()["choices"][0]["message"]["content"] == "Listing files."
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
    assert json.loads((tmp_path / "rec.jsonl").read_text())["body"]["messages"][1]["content"] == "Please solve inst-1 now."


def test_bad_script_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="unknown turn key 'contents'"):
        Script.from_dict({"tasks": {"a": [{"contents": "x"}]}})
    with pytest.raises(UserError, match="bad regular expression"):
        Script.from_dict({"tasks": {"re:(": []}})


def test_node_fetch_client_through_the_proxy(scripted, out, tmp_path):
    """Another HTTP stack (Node's undici, as the JS agents use) against our server: keep-alive + SSE."""
    need_program("node", "run scripts/services/node.sh (as root)")
    import subprocess

    js = tmp_path / "client.mjs"
    js.write_text("""
const [base, key] = process.argv.slice(2);
const headers = {"content-type": "application/json", "authorization": `Bearer ${key}`};
const body = {model: "m", messages: [{role: "user", content: "solve inst-1"}],
              tools: [{type: "function", function: {name: "bash", parameters: {}}}]};
const plain = await (await fetch(`${base}/chat/completions`, {method: "POST", headers, body: JSON.stringify(body)})).json();
const res = await fetch(`${base}/chat/completions`, {method: "POST", headers,
                                                     body: JSON.stringify({...body, stream: true})});
let text = "";
const decoder = new TextDecoder();
for await (const chunk of res.body) { text += decoder.decode(chunk); }
const models = await (await fetch(`${base}/models`, {headers})).json();
console.log(JSON.stringify({plain: plain.choices[0].message.content, stream: text.includes("[DONE]"),
                            models: models.data.length}));
""")
    with ModelProxy({}, scripted.url, None, out / "model_calls.jsonl", agent_key="k") as p:
        result = subprocess.run(["node", str(js), p.url_for("127.0.0.1"), "k"], capture_output=True, text=True,
                                timeout=60)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["plain"] == "Listing files." and seen["stream"] and seen["models"] == 1
    assert [r["status"] for r in calls(out)] == [200, 200, 200]
    assert calls(out)[1]["usage"]["total_tokens"] > 0


def test_http_server_reads_chunked_bodies_and_expect_continue():
    async def echo(request):
        return web.Response(body=(await request.read())[::-1], content_type="text/plain")

    def receive_until(s: socket.socket, data: bytes, done) -> bytes:
        """Read until `done(data)`; a closed connection or 30 s of silence fail, saying what came."""
        while not done(data):
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                chunk = None
            assert chunk, f"the server closed or went silent before the expected responses; got {data!r}"
            data += chunk
        return data

    server = ServerThread(catch_all(echo))
    port = server.start()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                      b"3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n")
            s.sendall(b"POST /y HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
            # as a client does: the body once the server said to go on
            data = receive_until(s, b"", lambda d: b"100 Continue" in d)
            s.sendall(b"xy")
            s.sendall(b"GARBAGE\r\n\r\n")
            data = receive_until(s, data, lambda d: d.count(b"HTTP/1.") >= 4)
    finally:
        server.stop()
    first, cont, second, bad = re.split(rb"HTTP/1\.[01] ", data)[1:]
    assert first.startswith(b"200") and first.endswith(b"\r\n\r\nedcba")
    assert cont.startswith(b"100 Continue") and second.endswith(b"yx")
    assert bad.startswith(b"400")


def test_bodies_beyond_the_limit_are_refused(monkeypatch):
    monkeypatch.setattr(http_server, "MAX_BODY", 1000)
    seen = []

    async def handle(request):
        seen.append(len(await request.read()))
        return web.Response(text="ok")

    thread = ServerThread(catch_all(handle))
    port = thread.start()
    try:
        assert httpx.post(f"http://127.0.0.1:{port}/x", content=b"a" * 1000).status_code == 200
        assert httpx.post(f"http://127.0.0.1:{port}/x", content=b"a" * 1001).status_code == 413
    finally:
        thread.stop()
    assert seen == [1000]


def test_backoff_delay_doubles_up_to_the_cap_with_jitter():
    for attempt, ceiling in ((0, 0.1), (1, 0.2), (2, 0.4), (5, 1.0)):
        delays = [backoff_delay(attempt, 0.1, 1.0) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays) and max(delays) > min(delays)
