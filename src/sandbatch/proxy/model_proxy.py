"""The per-rollout model proxy: the agent's only model endpoint during a harness run.

Usage in the harness job (an asyncio program)::

    from sandbatch.proxy import ModelProxy
    from sandbatch.sandbox import proxy_address

    bind, advertise = proxy_address(cfg.sandbox, cfg.model.proxy)
    async with ModelProxy.from_config(cfg.model, rollout_dir / "model_calls.jsonl",
                                      bind_host=bind) as proxy:
        base_url = proxy.url_for(advertise)        # "http://<advertise>:<port>/v1"
        ...run the agent with base_url and proxy.agent_key as its API key...
        proxy.stats                                 # calls, tokens, which cap was hit

The proxy is an aiohttp.web server on its own event loop in a daemon thread of the job
process (see `ServerThread`): the job's loop never does proxy work and is never blocked
by it, nothing is left behind if the job is killed (a thread dies with its process, a
child process would need reaping), and aiohttp is not imported again in a second
interpreter (a local run's step server imports it once for all jobs). The job itself
only waits on the sandbox, so the two barely compete for the GIL.

Per call it: drops `cache_control` at messages[].content[] and tools[]; applies
`model.sampling` and `model.proxy.extra_body` (they win over the agent); optionally
forces the model name; adds the upstream API key (held in memory only, never written);
retries connect errors, dropped connections, 429 (honouring Retry-After), 502 and 503
with jittered exponential backoff inside `retry_budget`; relays streams chunk by chunk;
refuses calls beyond `max_calls` / `max_tokens` with an OpenAI-style error; and appends
one JSON line per request to `calls_path` (calls.py). With `tokens` (model.tokens) other than
off it records each call's number, what it produced (`output`, digests for the convert step's
join) and its token ids and logprobs (`tokens`, see tokens.py); `on` also asks the
upstream for them and makes streamed calls unstreamed upstream where a stream carries
none (Responses always; Chat once a stream of this upstream came without them), streaming
the answer back to the agent (restream.py). Anthropic Messages calls (/v1/messages) are
translated to Chat calls and their answers back (messages.py), or passed through
(model.proxy.messages); so are Responses calls when model.proxy.responses says translate
(responses_api.py: Chat answers carry the ids of the whole generation). Where it listens: settings.py; the upstream side (headers,
retries, errors): upstream.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import aiohttp
from aiohttp import web

from .. import trace
from ..core.errors import InfraError, UserError
from ..core.failures import FailureClass
from ..contracts.model_calls import MODEL_ENDPOINTS
from . import tokens as token_data
from .calls import CallLog, now, since
from . import messages as messages_api
from . import responses_api
from .restream import chat_stream, responses_stream
from .rewrite import rewrite_request
from .server import ServerThread, catch_all
from .settings import proxy_settings, split_path
from .upstream import Failure, Upstream, error_response, exception_text, response_headers

if TYPE_CHECKING:
    from ..core.config import ModelConfig, ProxyConfig


class ModelProxy:
    """One rollout's model proxy. Start with `async with` (or `with`, or start()/stop()).

    settings: a ProxyConfig or a partial mapping of `model.proxy` keys.
    upstream_url: the model's base URL, normally ending in /v1 (request paths are
        appended below it: /chat/completions, /responses, /models).
    api_key: the upstream key (ModelConfig.upstream_key()), sent as
        `Authorization: Bearer`; kept in memory only. The agent's own key is never forwarded.
    agent_key: what the agent must send as its API key (Bearer, x-api-key or api-key)
        when model.proxy.require_agent_key is on, so that a proxy listening on 0.0.0.0
        does not lend the upstream key to anyone on the network; default: a fresh random
        key per proxy, readable as `.agent_key`.
    calls_path: model_calls.jsonl, appended one line per request.
    sampling: `model.sampling`; model_name: `model.name` (used when force_model_name).
    tokens: `model.tokens` (auto, on, off).
    bind_host / port: override the settings' values (bind_host None = 127.0.0.1).

    Attributes after start: `port`, `url_for(host)`, `stats`, `agent_key`.
    """

    def __init__(
        self,
        settings: "ProxyConfig | Mapping[str, Any] | None",
        upstream_url: str,
        api_key: str | None,
        calls_path: str | os.PathLike,
        *,
        sampling: Mapping[str, Any] | None = None,
        model_name: str | None = None,
        bind_host: str | None = None,
        port: int | None = None,
        agent_key: str | None = None,
        tokens: str = "auto",
    ):
        if not upstream_url or not upstream_url.startswith(("http://", "https://")):
            raise UserError(f"model.base_url: {upstream_url!r} is not an http(s) URL; set it to the "
                            "OpenAI-compatible endpoint, e.g. http://host:8000/v1")
        self.settings = proxy_settings(settings)
        self.upstream_url = upstream_url.rstrip("/")
        self.sampling = dict(sampling or {})
        self.token_mode = tokens
        self._chat_streams_bare = False  # a Chat stream came without token ids: restream them
        self.model_name = model_name
        self.bind_host = bind_host or self.settings.bind_host or "127.0.0.1"
        self._upstream = Upstream(self.upstream_url, api_key, self.settings)
        self.agent_key = agent_key or "sbx-" + secrets.token_urlsafe(24)
        self._thread = ServerThread(catch_all(self.handle, self.startup, self.shutdown), self.bind_host,
                                    self.settings.port if port is None else port, name="model-proxy")
        self.calls = 0  # model calls forwarded (refused ones excluded)
        self.refused = 0
        self.cap_hit: str | None = None  # "max_calls" / "max_tokens" once a call was refused
        # the harness step's span: parent of each call's span
        self._log = CallLog(calls_path, tokens, trace.capture(), self.settings.stop_after_failures)
        self._log.on_outage = self._outage
        self.outage: str | None = None  # the endpoint failure class once the endpoint is down
        self._on_down: Callable[[], None] | None = None

    @classmethod
    def from_config(cls, model: "ModelConfig", calls_path: str | os.PathLike, *,
                    bind_host: str | None = None, port: int | None = None) -> "ModelProxy":
        """Build from the run's `model` block; the API key is ModelConfig.upstream_key()."""
        api_key = model.upstream_key()
        if model.api_key_env and not api_key:
            raise UserError(f"model.api_key_env: the environment variable {model.api_key_env} is not set; "
                            "export it in the shell that starts the run")
        if not model.base_url:
            raise UserError("model.base_url: not set; give the OpenAI-compatible endpoint, e.g. http://host:8000/v1")
        return cls(model.proxy, model.base_url, api_key, calls_path, sampling=model.sampling,
                   model_name=model.name, bind_host=bind_host, port=port, tokens=model.tokens)

    # --- lifecycle ----------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._thread.port

    def url_for(self, host: str) -> str:
        """Base URL (ending in /v1) under which `host`'s clients reach this proxy."""
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"  # IPv6 literal
        return f"http://{host}:{self.port}/v1"

    @property
    def calls_path(self) -> Path:
        return self._log.path

    @property
    def tokens(self) -> int:
        """Total tokens reported by the upstream so far."""
        return self._log.tokens

    def down(self) -> asyncio.Event:
        """An event of the calling loop, set once model.proxy.stop_after_failures model calls
        in a row failed for the endpoint's reasons (the agent may then be stopped early)."""
        loop, event = asyncio.get_running_loop(), asyncio.Event()
        self._on_down = lambda: loop.call_soon_threadsafe(event.set)
        if self.outage is not None:
            event.set()
        return event

    def _outage(self, failure_class: str) -> None:  # on the proxy's thread
        self.outage = failure_class
        if self._on_down is not None:
            with contextlib.suppress(RuntimeError):  # the step's loop already closed
                self._on_down()

    @property
    def stats(self) -> dict[str, Any]:
        return {"calls": self.calls, "refused": self.refused, "tokens": self.tokens, "cap_hit": self.cap_hit}

    def start(self) -> "ModelProxy":
        try:
            self._thread.start()
        except OSError as exc:  # e.g. a fixed model.proxy.port already in use
            raise InfraError(f"model proxy: cannot listen on {self.bind_host}:{self._thread.port} "
                             f"({exc.strerror or exc})", FailureClass.PROXY) from None
        return self

    def stop(self) -> None:
        self._thread.stop()

    def __enter__(self) -> "ModelProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    async def __aenter__(self) -> "ModelProxy":
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc) -> None:
        await asyncio.to_thread(self.stop)

    # --- the server (runs on the proxy's own loop) ----------------------------------------

    async def startup(self) -> None:
        self._upstream.open()
        self._log.open()

    async def shutdown(self) -> None:
        await self._upstream.close()
        self._log.close()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        answer = await self._answer(request)
        # a Messages client reads Anthropic's error shape
        return messages_error(answer) if split_path(request.path)[0] in ("messages", "count_tokens") else answer

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        endpoint, rest = split_path(request.path)
        record: dict[str, Any] = {"timestamp": now(), "method": request.method, "path": request.path,
                                  "endpoint": endpoint}
        t0 = time.monotonic()
        if self.settings.require_agent_key and not self._authorized(request.headers):
            record.update(status=401, refused="agent_key", latency_s=since(t0),
                          error="request without this rollout's agent key")
            self._log.write(record)
            return error_response(401, "sandbatch model proxy: missing or wrong API key; give the agent the proxy's "
                               "agent_key as its API key", "invalid_api_key", "invalid_request_error")
        body = await request.read()
        try:
            if request.method == "POST" and endpoint == "count_tokens" and self.settings.messages == "translate":
                return await self._count_tokens(body, record, t0)  # passed through: the upstream counts
            if request.method == "POST" and endpoint in MODEL_ENDPOINTS:
                return await self._model_call(request, body, endpoint, rest, record, t0)
            return await self._passthrough(request, body, rest, record, t0)
        except asyncio.CancelledError:
            record.update(status=None, error="proxy stopped during the call", latency_s=since(t0))
            self._log.write(record)
            raise

    def _authorized(self, headers: Mapping[str, str]) -> bool:
        want = self.agent_key.encode()
        given = [headers.get("x-api-key", ""), headers.get("api-key", "")]
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            given.append(auth[7:].strip())
        return any(hmac.compare_digest(g.encode(), want) for g in given if g)

    def _refusal(self) -> tuple[str, str] | None:
        s = self.settings
        if s.max_calls is not None and self.calls >= s.max_calls:
            return "max_calls", (f"sandbatch model proxy: per-rollout cap model.proxy.max_calls = {s.max_calls} "
                                 f"reached ({self.calls} model calls made); no further calls are forwarded")
        if s.max_tokens is not None and self.tokens >= s.max_tokens:
            return "max_tokens", (f"sandbatch model proxy: per-rollout cap model.proxy.max_tokens = {s.max_tokens} "
                                  f"reached ({self.tokens} tokens used); no further calls are forwarded")
        return None

    async def _model_call(self, request: web.Request, raw: bytes, endpoint: str, rest: str, record: dict,
                          t0: float) -> web.StreamResponse:
        s = self.settings
        try:
            body = json.loads(raw)
        except ValueError as exc:
            body = exc
        if not isinstance(body, dict):
            record.update(status=400, error="request body is not a JSON object", latency_s=since(t0))
            self._log.write(record)
            return error_response(400, "sandbatch model proxy: the request body must be a JSON object",
                          "invalid_body", "invalid_request_error")
        refusal = self._refusal()
        if refusal is not None:
            cap, message = refusal
            self.refused += 1
            self.cap_hit = self.cap_hit or cap
            record.update(model=body.get("model"), stream=body.get("stream") is True, status=s.cap_status,
                          refused=cap, error=message, latency_s=since(t0))
            self._log.write(record)
            kind = "rate_limit_error" if s.cap_status == 429 else "invalid_request_error"
            return error_response(s.cap_status, message, f"{cap}_exceeded", kind)
        self.calls += 1
        record["call"] = self.calls
        # Messages calls (messages.py) and, when asked, Responses calls (responses_api.py):
        # translated to one unstreamed Chat call, unless passed through
        translated = endpoint if (endpoint, "translate") in (("messages", s.messages),
                                                             ("responses", s.responses)) else None
        client_body, client_stream = body, body.get("stream") is True
        if translated:
            body, left_out = _TRANSLATORS[translated].to_chat(body)
            endpoint, rest = "chat", "/chat/completions"
            record.update(upstream_endpoint="chat", **left_out)
        changes = rewrite_request(
            body, endpoint, drop_cache=s.drop_cache_control, sampling=self.sampling, extra_body=s.extra_body,
            model=self.model_name if s.force_model_name else None, stream_usage=s.stream_usage)
        record.update(model=body.get("model"), stream=client_stream, **changes)
        restream = usage_chunk = False
        if self.token_mode == "on":
            record.update(token_data.ask(body, endpoint))
            # a stream without token ids (Responses; Chat from this upstream once one came
            # without): ask unstreamed, stream the answer back
            restream = body.get("stream") is True and (endpoint == "responses" or (
                endpoint == "chat" and self._chat_streams_bare))
            if restream:
                usage_chunk = (body.pop("stream_options", None) or {}).get("include_usage") is True
                body["stream"] = False
                record["restreamed"] = True
        if translated == "responses":
            body["stream"] = False
        continuing = token_data.continuing(body)
        content = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        record["request_bytes"] = len(content)
        try:
            upstream = await self._upstream.send("POST", self.upstream_url + rest, request.query_string, content,
                                        self._upstream.headers(request, content, anthropic=endpoint == "messages"))
        except Failure as failure:
            record.update(status=failure.response.status, attempts=failure.attempts,
                          attempt_statuses=failure.statuses, error=failure.error, latency_s=since(t0),
                          endpoint_failure=failure.failure_class)
            self._log.account(record)
            return failure.response
        resp, attempts, statuses = upstream
        record.update(attempts=attempts, status=resp.status)
        if len(statuses) > 1:
            record["attempt_statuses"] = statuses
        headers = response_headers(resp)
        if resp.content_type == "text/event-stream":
            translator = messages_api.StreamTranslator(client_body.get("model")) if translated else None
            return await self._relay(request, resp, headers, record, t0, continuing, body, translator)
        try:
            data = await resp.read()
        except self._upstream.errors as exc:
            error = f"upstream failed while sending its answer ({exception_text(exc)})"
            record.update(status=502, upstream_status=resp.status, error=error, latency_s=since(t0))
            self._log.account(record)
            return error_response(502, f"sandbatch model proxy: {error}", "upstream_error")
        finally:
            resp.release()
        record["latency_s"] = since(t0)
        record["response_bytes"] = len(data)
        if translated == "messages":
            answer = await self._messages_answer(request, resp.status, data, headers, client_body.get("model"),
                                                 client_stream)
        elif translated == "responses":
            answer = await self._responses_answer(request, resp.status, data, headers, client_body, client_stream)
        elif restream and resp.status < 400:
            answer = await self._restream(request, data, headers, endpoint, usage_chunk)
        else:
            answer = web.Response(status=resp.status, body=data, headers=headers)
            # parse after the bytes are on their way: the agent does not wait for bookkeeping
            await answer.prepare(request)
            await answer.write_eof()
        self._log.finish(record, data, continuing, body)
        return answer

    async def _messages_answer(self, request: web.Request, status: int, data: bytes, headers: dict[str, str],
                               model: Any, stream: bool) -> web.StreamResponse:
        """A Chat answer sent to a Messages client: the message, or its event stream."""
        headers = {k: v for k, v in headers.items() if k != "content-type"}
        if status >= 400:
            return web.json_response(messages_api.error(status, messages_api.error_message(data)), status=status,
                                     headers=headers)
        obj = _json_object(data)
        if obj is None:
            return web.json_response(messages_api.error(502, "sandbatch model proxy: the upstream's answer is not "
                                                        "a JSON object"), status=502)
        message = messages_api.from_chat(obj, model)
        if not stream:
            return web.json_response(message, headers=headers)
        return await self._send_stream(request, headers, messages_api.stream(message))

    async def _responses_answer(self, request: web.Request, status: int, data: bytes, headers: dict[str, str],
                                client_body: dict[str, Any], stream: bool) -> web.StreamResponse:
        """A Chat answer sent to a Responses client: the response, or its event stream."""
        headers = {k: v for k, v in headers.items() if k != "content-type"}
        if status >= 400:  # the upstream's error is in OpenAI's shape already
            return web.Response(status=status, body=data, headers={**headers, "content-type": "application/json"})
        obj = _json_object(data)
        if obj is None:
            return error_response(502, "sandbatch model proxy: the upstream's answer is not a JSON object",
                                  "upstream_error")
        response = responses_api.from_chat(obj, client_body)
        if not stream:
            return web.json_response(response, headers=headers)
        return await self._send_stream(request, headers, responses_stream(response))

    async def _count_tokens(self, raw: bytes, record: dict, t0: float) -> web.Response:
        """Messages' count_tokens, answered here: by the upstream's tokenizer endpoint when
        model.proxy.tokenize_url names one, else (or when it fails) an estimate."""
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            record.update(status=400, error="request body is not a JSON object", latency_s=since(t0))
            self._log.write(record)
            return web.json_response(messages_api.error(400, "sandbatch model proxy: the request body must be a "
                                                        "JSON object"), status=400)
        count = await self._tokenize(body, record) if self.settings.tokenize_url else None
        if count is None:
            count = messages_api.count_tokens(body)
            record["counted_by"] = "estimate"
        record.update(status=200, input_tokens=count, latency_s=since(t0))
        self._log.write(record)
        return web.json_response({"input_tokens": count})

    async def _tokenize(self, body: dict[str, Any], record: dict) -> int | None:
        """The prompt tokens of a Messages request as the upstream's tokenizer endpoint counts
        them (vLLM's /tokenize: the chat's messages and tools through the served model's
        chat template); None, with the reason in the record, when it cannot."""
        chat, _ = messages_api.to_chat(body)
        model = self.model_name if self.settings.force_model_name and self.model_name else chat.get("model")
        ask = {"model": model, "messages": chat["messages"], "add_generation_prompt": True,
               **({"tools": chat["tools"]} if chat.get("tools") else {})}
        content = json.dumps(ask, separators=(",", ":"), ensure_ascii=False).encode()
        try:
            resp, _, _ = await self._upstream.send("POST", self.settings.tokenize_url, "", content,
                                                   self._upstream.headers(None, content))
        except Failure as failure:
            record["tokenize_error"] = failure.error
            return None
        try:
            data = await resp.read()
        except self._upstream.errors as exc:
            record["tokenize_error"] = exception_text(exc)
            return None
        finally:
            resp.release()
        count = (_json_object(data) or {}).get("count") if resp.status == 200 else None
        if not isinstance(count, int) or isinstance(count, bool):
            record["tokenize_error"] = f"HTTP {resp.status}: {data[:300].decode('utf-8', 'replace')}"
            return None
        record["counted_by"] = "tokenize"
        return count

    async def _restream(self, request: web.Request, data: bytes, headers: dict[str, str], endpoint: str,
                        usage_chunk: bool) -> web.StreamResponse:
        """Send an unstreamed answer to the agent as the event stream it asked for."""
        obj = _json_object(data) or {}
        headers = {k: v for k, v in headers.items() if k != "content-type"}
        return await self._send_stream(request, headers, responses_stream(obj) if endpoint == "responses"
                                       else chat_stream(obj, usage_chunk))

    @staticmethod
    async def _send_stream(request: web.Request, headers: dict[str, str], events: bytes) -> web.StreamResponse:
        """Send a whole event stream at once."""
        out = web.StreamResponse(status=200, headers={**headers, "content-type": "text/event-stream",
                                                      "cache-control": "no-cache"})
        await out.prepare(request)
        await out.write(events)
        await out.write_eof()
        return out

    async def _relay(self, request: web.Request, resp: aiohttp.ClientResponse, headers: dict[str, str],
                     record: dict, t0: float, continuing: bool, body: dict,
                     translator: "messages_api.StreamTranslator | None" = None) -> web.StreamResponse:
        """Relay an event stream chunk by chunk, scanning it for usage and tokens on the way;
        with a `translator`, each chunk goes out as the Messages events it makes."""
        scanner = self._log.scanner()
        out = web.StreamResponse(status=resp.status, headers=headers)
        size = 0
        try:
            await out.prepare(request)
            async for chunk in resp.content.iter_any():
                if size == 0:
                    record["first_byte_s"] = since(t0)
                size += len(chunk)
                scanner.feed(chunk)
                events = translator.feed(chunk) if translator is not None else chunk
                if events:
                    await out.write(events)
            scanner.close()
            if translator is not None:
                await out.write(translator.close())
            await out.write_eof()
        except ConnectionResetError:  # the agent closed the connection: nothing more to send
            record.setdefault("error", "the agent closed the stream early")
        except asyncio.CancelledError:
            record.setdefault("error", "the agent closed the stream early")
            raise
        except self._upstream.errors as exc:
            # a status can no longer be sent: raising ends the connection without the final
            # chunk, so the agent sees a truncated stream
            record.update(error=f"upstream stream broke ({exception_text(exc)})",
                          endpoint_failure=FailureClass.MODEL_UNAVAILABLE)
            raise
        finally:
            resp.release()
            record.update(latency_s=since(t0), response_bytes=size, usage=scanner.usage)
            if scanner.tokens is not None and resp.status < 400:
                self._log.keep_tokens(record, scanner.tokens, continuing, body)
                if self.token_mode == "on" and record.get("upstream_endpoint", record["endpoint"]) == "chat" and \
                        not (record.get("tokens") or {}).get("prompt"):
                    self._chat_streams_bare = True  # asked, no prompt ids came: restream the next ones
            self._log.account(record)
        return out

    async def _passthrough(self, request: web.Request, body: bytes, rest: str, record: dict,
                           t0: float) -> web.Response:
        """Any other path (e.g. /models): forwarded as is, recorded, never counted as a call."""
        try:
            headers = self._upstream.headers(request, body, anthropic=record["endpoint"] == "count_tokens")
            resp, attempts, statuses = await self._upstream.send(request.method, self.upstream_url + rest,
                                                                 request.query_string, body, headers)
        except Failure as failure:
            record.update(status=failure.response.status, attempts=failure.attempts, error=failure.error,
                          latency_s=since(t0))
            self._log.write(record)
            return failure.response
        try:
            data = await resp.read()
        except self._upstream.errors as exc:
            data = b""
            record["error"] = exception_text(exc)
        finally:
            resp.release()
        record.update(status=resp.status, attempts=attempts, latency_s=since(t0))
        self._log.write(record)
        return web.Response(status=resp.status, body=data, headers=response_headers(resp))


# the APIs translated to Chat Completions upstream, by endpoint
_TRANSLATORS = {"messages": messages_api, "responses": responses_api}


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(data)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def messages_error(answer: web.StreamResponse) -> web.StreamResponse:
    """An error answer of the proxy's own (OpenAI's shape) in Anthropic's shape, for a Messages
    client; any other answer as it is."""
    body = answer.body if isinstance(answer, web.Response) and answer.status >= 400 else None
    try:
        obj = json.loads(body) if isinstance(body, bytes) else None
    except ValueError:
        obj = None
    if not isinstance(obj, dict) or obj.get("type") == "error" or not isinstance(obj.get("error"), dict):
        return answer
    return web.json_response(messages_api.error(answer.status, str(obj["error"].get("message"))),
                             status=answer.status, headers={k: v for k, v in answer.headers.items()
                                                            if k.lower() not in ("content-type", "content-length")})
