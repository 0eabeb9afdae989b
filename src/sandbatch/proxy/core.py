"""The per-rollout model proxy: the agent's only model endpoint during a harness run.

Usage in the harness job (an asyncio program)::

    from sandbatch.proxy import ModelProxy, proxy_hosts

    bind, advertise = proxy_hosts(cfg.sandbox.provider, cfg.model.proxy, cfg.sandbox.service())
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
one JSON line per request to `calls_path`. With `tokens` (model.tokens) other than off it
records each call's number, what it produced (`output`, digests for the convert step's
join) and its token ids and logprobs (`tokens`, see tokens.py); `on` also asks the
upstream for them and makes streamed calls unstreamed upstream where a stream carries
none (Responses always; Chat once a stream of this upstream came without them), streaming
the answer back to the agent (restream.py).
"""

from __future__ import annotations

import asyncio
import email.utils
import hmac
import json
import os
import secrets
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import aiohttp
from aiohttp import web

from .. import trace
from ..core.errors import InfraError, UserError
from ..rollout.usage import MODEL_ENDPOINTS, usage_of
from ..core.util import backoff_delay
from . import tokens as token_data
from .restream import chat_stream, responses_stream
from .rewrite import rewrite_request
from .server import ServerThread, catch_all

if TYPE_CHECKING:
    from ..core.config import ModelConfig, ProxyConfig

# sandbox provider -> (bind host, advertised host) when model.proxy leaves them null
PROVIDER_HOSTS: dict[str, tuple[str, str | None]] = {
    "local": ("127.0.0.1", "127.0.0.1"),
    "docker": ("0.0.0.0", "host.docker.internal"),
}

RETRY_STATUSES = frozenset({429, 502, 503})

# never forwarded either way: connection management, framing, and the agent's credentials
_DROP_REQUEST = frozenset({
    "host", "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer",
    "upgrade", "expect", "proxy-authorization", "proxy-connection", "accept-encoding",
    "authorization", "api-key", "x-api-key",
})
_DROP_RESPONSE = frozenset({
    "content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding",
    "date", "server",
})

_ENDPOINTS = {"/chat/completions": "chat", "/responses": "responses", "/completions": "completions"}


def proxy_settings(values: "ProxyConfig | Mapping[str, Any] | None" = None) -> "ProxyConfig":
    """A ProxyConfig from a partial mapping; missing keys take the schema's defaults."""
    from ..core.config import ProxyConfig, load_schema

    if isinstance(values, ProxyConfig):
        return values
    schema = load_schema()["properties"]["model"]["properties"]["proxy"]["properties"]
    merged = {key: sub["default"] for key, sub in schema.items()}
    unknown = set(values or {}) - set(merged)
    if unknown:
        raise UserError(f"model.proxy: unknown key '{sorted(unknown)[0]}'; allowed keys: {', '.join(sorted(merged))}")
    merged.update(values or {})
    return ProxyConfig.model_validate(merged)


def proxy_hosts(provider: str, settings: "ProxyConfig | Mapping[str, Any] | None" = None,
                service: str | None = None) -> tuple[str, str]:
    """(bind host, advertised host) for a sandbox provider, config values first.

    A provider without a fixed default (opensandbox) advertises this host's address on its
    route toward `service` ("host:port" of the sandbox service).
    """
    s = proxy_settings(settings)
    bind_default, advertise_default = PROVIDER_HOSTS.get(provider, ("0.0.0.0", None))
    advertise = s.advertise_host or advertise_default or (route_source(service) if service else None)
    if advertise is None:
        toward = f" toward {service}" if service else ""
        raise UserError(
            f"model.proxy.advertise_host: no default for sandbox provider '{provider}' and no route{toward} "
            "to derive one from; set it to an address of this host that the sandboxes can reach, "
            "or set model.proxy.enabled: false"
        )
    return s.bind_host or bind_default, advertise


# stands for "anywhere off this host": only the routing table is consulted, nothing is sent
_OFF_HOST = "192.0.2.1"


def route_source(service: str) -> str | None:
    """This host's source address on its route toward `service` (host:port), or None.

    A service on this host (a loopback route) runs its sandboxes on this host's container
    engine, which never reaches the host's loopback: the address of the route off the host
    is used instead.
    """
    import ipaddress
    import socket

    host, _, port = service.rpartition(":") if ":" in service else (service, "", "80")
    host = host.strip("[]") or service

    def source(target: str, port: int) -> str | None:
        try:
            infos = socket.getaddrinfo(target, port, type=socket.SOCK_DGRAM)
        except (OSError, UnicodeError):
            return None
        for family, _, _, _, addr in infos:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                try:
                    sock.connect(addr)  # UDP: picks the route, sends nothing
                    return sock.getsockname()[0]
                except OSError:
                    continue
        return None

    found = source(host, int(port) if port.isdigit() else 80)
    if found is not None and ipaddress.ip_address(found.split("%")[0]).is_loopback:
        found = source(_OFF_HOST, 9)
    return found


def split_path(path: str) -> tuple[str, str]:
    """(endpoint kind, path below the API root): /v1/chat/completions -> ("chat", "/chat/completions").

    Any number of leading /v1 segments is dropped, so clients that add /v1 to a base URL
    already ending in /v1 (or none at all) still reach the right upstream path.
    """
    while path == "/v1" or path.startswith("/v1/"):
        path = path[3:]
    path = "/" + path.lstrip("/")
    rest = path.rstrip("/") or "/"
    if rest in _ENDPOINTS:
        return _ENDPOINTS[rest], rest
    if rest == "/models" or rest.startswith("/models/"):
        return "models", rest
    return "other", rest


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds asked for by `retry-after-ms` or `Retry-After` (seconds or an HTTP date)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def _error(status: int, message: str, code: str, kind: str = "proxy_error") -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "param": None, "code": code}},
                             status=status)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Failure(Exception):
    """The upstream could not answer; carries the response for the agent and the record."""

    def __init__(self, response: web.Response, error: str, attempts: int, statuses: list):
        super().__init__(error)
        self.response = response
        self.error = error
        self.attempts = attempts
        self.statuses = statuses


class _SSEScanner:
    """Finds usage (and token data) in an SSE byte stream without holding the whole stream.

    Events are parsed only when they may hold what is looked for: usage, or with a
    collector, token data (`every`: all events, as they carry the output too).
    """

    def __init__(self, tokens: token_data.TokenCollector | None, every: bool = False):
        self.tokens = tokens
        self.every = every
        self.usage: dict[str, int] | None = None
        self._buffer = b""

    def feed(self, chunk: bytes) -> None:
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n")
        buffer = self._buffer + chunk
        end = buffer.rfind(b"\n\n")
        if end < 0:
            self._buffer = buffer
            return
        self._buffer = buffer[end + 2:]
        if not self._wanted(buffer):
            return  # the common case: nothing to look at in these events
        for event in buffer[:end].split(b"\n\n"):
            self._event(event)

    def _wanted(self, data: bytes) -> bool:
        if self.tokens is None:
            return b'"usage"' in data
        return self.every or b'"usage"' in data or token_data.MARKER.search(data) is not None

    def _event(self, event: bytes) -> None:
        if not self._wanted(event):
            return
        data = b"\n".join(line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:"))
        if not data or data == b"[DONE]":
            return
        try:
            obj = json.loads(data)
        except ValueError:
            return
        usage = usage_of(obj)
        if usage is not None:
            self.usage = usage  # cumulative when a server reports per chunk: the last one wins
        if self.tokens is not None:
            self.tokens.add(obj)

    def close(self) -> None:
        if self._buffer.strip():
            self._event(self._buffer)
        self._buffer = b""


class ModelProxy:
    """One rollout's model proxy. Start with `async with` (or `with`, or start()/stop()).

    settings: a ProxyConfig or a partial mapping of `model.proxy` keys.
    upstream_url: the model's base URL, normally ending in /v1 (request paths are
        appended below it: /chat/completions, /responses, /models).
    api_key: the upstream key (read from the env var the config names), sent as
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
        self.calls_path = Path(calls_path)
        self.sampling = dict(sampling or {})
        self.token_mode = tokens
        self._prompts = token_data.PromptLog()
        self._chat_streams_bare = False  # a Chat stream came without token ids: restream them
        self.model_name = model_name
        self.bind_host = bind_host or self.settings.bind_host or "127.0.0.1"
        self._api_key = api_key
        self.agent_key = agent_key or "sbx-" + secrets.token_urlsafe(24)
        self._thread = ServerThread(catch_all(self.handle, self.startup, self.shutdown), self.bind_host,
                                    self.settings.port if port is None else port, name="model-proxy")
        self._client: aiohttp.ClientSession | None = None
        self._log = None
        self.calls = 0  # model calls forwarded (refused ones excluded)
        self.refused = 0
        self.tokens = 0  # total tokens reported by the upstream so far
        self.cap_hit: str | None = None  # "max_calls" / "max_tokens" once a call was refused
        self._trace_parent = trace.capture()  # the harness step's span: parent of each call's span

    @classmethod
    def from_config(cls, model: "ModelConfig", calls_path: str | os.PathLike, *,
                    bind_host: str | None = None, port: int | None = None) -> "ModelProxy":
        """Build from the run's `model` block; the API key comes from model.api_key_env."""
        api_key = None
        if model.api_key_env:
            api_key = os.environ.get(model.api_key_env)
            if not api_key:
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
    def stats(self) -> dict[str, Any]:
        return {"calls": self.calls, "refused": self.refused, "tokens": self.tokens, "cap_hit": self.cap_hit}

    def start(self) -> "ModelProxy":
        try:
            self._thread.start()
        except OSError as exc:  # e.g. a fixed model.proxy.port already in use
            raise InfraError(f"model proxy: cannot listen on {self.bind_host}:{self._thread.port} "
                             f"({exc.strerror or exc})", "proxy") from None
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
        s = self.settings
        # aiohttp rather than httpx: ~0.2 ms of CPU per proxied call instead of 0.7-1.1 ms
        # (benchmarks/proxy_overhead.py), which alone would exceed the 1 ms overhead target
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=s.connect_timeout, connect=None,
                                        sock_read=s.read_timeout)
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
        # trust_env would look up proxies and netrc in a worker thread on every call; the
        # upstream is fixed, so look its HTTP(S)_PROXY / NO_PROXY up once instead
        self._client = aiohttp.ClientSession(timeout=timeout, connector=connector, trust_env=False,
                                             skip_auto_headers=("User-Agent",))
        self._via = _env_proxy(self.upstream_url)
        # connect failures, refused or dropped connections (a stale keep-alive too): retried
        self._retryable = (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError,
                           aiohttp.ClientOSError, aiohttp.ConnectionTimeoutError)
        self._errors = (aiohttp.ClientError, asyncio.TimeoutError)
        self.calls_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.calls_path, "a", encoding="utf-8")

    async def shutdown(self) -> None:
        if self._client is not None:
            await self._client.close()
        if self._log is not None:
            self._log.close()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        endpoint, rest = split_path(request.path)
        record: dict[str, Any] = {"timestamp": _now(), "method": request.method, "path": request.path,
                                  "endpoint": endpoint}
        t0 = time.monotonic()
        if self.settings.require_agent_key and not self._authorized(request.headers):
            record.update(status=401, refused="agent_key", latency_s=_since(t0),
                          error="request without this rollout's agent key")
            self._write(record)
            return _error(401, "sandbatch model proxy: missing or wrong API key; give the agent the proxy's "
                               "agent_key as its API key", "invalid_api_key", "invalid_request_error")
        body = await request.read()
        try:
            if request.method == "POST" and endpoint in MODEL_ENDPOINTS:
                return await self._model_call(request, body, endpoint, rest, record, t0)
            return await self._passthrough(request, body, rest, record, t0)
        except asyncio.CancelledError:
            record.update(status=None, error="proxy stopped during the call", latency_s=_since(t0))
            self._write(record)
            raise

    def _authorized(self, headers: Mapping[str, str]) -> bool:
        want = self.agent_key.encode()
        given = [headers.get("x-api-key", ""), headers.get("api-key", "")]
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            given.append(auth[7:].strip())
        return any(hmac.compare_digest(g.encode(), want) for g in given if g)

    # --- recording -------------------------------------------------------------------------

    def _write(self, record: dict[str, Any]) -> None:
        if self._log is None or self._log.closed:
            return
        self._log.write(json.dumps(record, separators=(",", ":"), ensure_ascii=False, default=str) + "\n")
        self._log.flush()  # a killed job keeps every finished call

    def _account(self, record: dict[str, Any]) -> None:
        usage = record.get("usage")
        if usage:
            self.tokens += usage.get("total_tokens", 0)
        self._write(record)
        trace.model_call(record, self._trace_parent)

    # --- forwarding -------------------------------------------------------------------------

    def _headers(self, request: web.Request, body: bytes) -> dict[str, str]:
        headers = _lower(request.headers, _DROP_REQUEST)
        headers["accept-encoding"] = "identity"  # bytes are relayed as they come
        if body:
            headers.setdefault("content-type", "application/json")
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        return headers

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
            record.update(status=400, error="request body is not a JSON object", latency_s=_since(t0))
            self._write(record)
            return _error(400, "sandbatch model proxy: the request body must be a JSON object",
                          "invalid_body", "invalid_request_error")
        refusal = self._refusal()
        if refusal is not None:
            cap, message = refusal
            self.refused += 1
            self.cap_hit = self.cap_hit or cap
            record.update(model=body.get("model"), stream=body.get("stream") is True, status=s.cap_status,
                          refused=cap, error=message, latency_s=_since(t0))
            self._write(record)
            kind = "rate_limit_error" if s.cap_status == 429 else "invalid_request_error"
            return _error(s.cap_status, message, f"{cap}_exceeded", kind)
        self.calls += 1
        record["call"] = self.calls
        changes = rewrite_request(
            body, endpoint, drop_cache=s.drop_cache_control, sampling=self.sampling, extra_body=s.extra_body,
            model=self.model_name if s.force_model_name else None, stream_usage=s.stream_usage)
        record.update(model=body.get("model"), stream=body.get("stream") is True, **changes)
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
        continuing = token_data.continuing(body)
        content = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        record["request_bytes"] = len(content)
        try:
            upstream = await self._send("POST", self.upstream_url + rest, request.query_string, content,
                                        self._headers(request, content))
        except _Failure as failure:
            record.update(status=failure.response.status, attempts=failure.attempts,
                          attempt_statuses=failure.statuses, error=failure.error, latency_s=_since(t0))
            self._account(record)
            return failure.response
        resp, attempts, statuses = upstream
        record.update(attempts=attempts, status=resp.status)
        if len(statuses) > 1:
            record["attempt_statuses"] = statuses
        headers = _response_headers(resp)
        if resp.content_type == "text/event-stream":
            return await self._relay(request, resp, headers, record, t0, continuing)
        try:
            data = await resp.read()
        except self._errors as exc:
            error = f"upstream failed while sending its answer ({_exception_text(exc)})"
            record.update(status=502, upstream_status=resp.status, error=error, latency_s=_since(t0))
            self._account(record)
            return _error(502, f"sandbatch model proxy: {error}", "upstream_error")
        finally:
            resp.release()
        record["latency_s"] = _since(t0)
        record["response_bytes"] = len(data)
        if restream and resp.status < 400:
            answer = await self._restream(request, data, headers, endpoint, usage_chunk)
        else:
            answer = web.Response(status=resp.status, body=data, headers=headers)
            # parse after the bytes are on their way: the agent does not wait for bookkeeping
            await answer.prepare(request)
            await answer.write_eof()
        self._finish(record, data, continuing)
        return answer

    async def _restream(self, request: web.Request, data: bytes, headers: dict[str, str], endpoint: str,
                        usage_chunk: bool) -> web.StreamResponse:
        """Send an unstreamed answer to the agent as the event stream it asked for."""
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        obj = obj if isinstance(obj, dict) else {}
        headers = {k: v for k, v in headers.items() if k != "content-type"}
        out = web.StreamResponse(status=200, headers={**headers, "content-type": "text/event-stream",
                                                      "cache-control": "no-cache"})
        await out.prepare(request)
        await out.write(responses_stream(obj) if endpoint == "responses" else chat_stream(obj, usage_chunk))
        await out.write_eof()
        return out

    def _finish(self, record: dict[str, Any], data: bytes, continuing: bool) -> None:
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            record["usage"] = usage_of(obj)
            if record.get("status", 200) >= 400 and isinstance(obj.get("error"), (dict, str)):
                err = obj["error"]
                record["error"] = (err.get("message") if isinstance(err, dict) else err) or str(err)
            elif self.token_mode != "off":
                collector = token_data.TokenCollector()
                collector.add(obj)
                self._keep_tokens(record, collector, continuing)
        else:
            record["usage"] = None
        self._account(record)

    def _keep_tokens(self, record: dict[str, Any], collector: "token_data.TokenCollector", continuing: bool) -> None:
        """The call's `tokens` (a prompt delta) when they came, and its `output` (for the join)
        when they came or were asked for."""
        kept = self._prompts.record(record["call"], collector.prompt_token_ids, collector.generation(),
                                    collector.logprobs, continuing)
        if kept is not None:
            record["tokens"] = kept
        if kept is not None or self.token_mode == "on":
            record["output"] = collector.output()

    async def _relay(self, request: web.Request, resp: aiohttp.ClientResponse, headers: dict[str, str],
                     record: dict, t0: float, continuing: bool) -> web.StreamResponse:
        """Relay an event stream chunk by chunk, scanning it for usage and tokens on the way."""
        scanner = _SSEScanner(token_data.TokenCollector() if self.token_mode != "off" else None,
                              every=self.token_mode == "on")
        out = web.StreamResponse(status=resp.status, headers=headers)
        size = 0
        try:
            await out.prepare(request)
            async for chunk in resp.content.iter_any():
                if size == 0:
                    record["first_byte_s"] = _since(t0)
                size += len(chunk)
                scanner.feed(chunk)
                await out.write(chunk)
            scanner.close()
            await out.write_eof()
        except ConnectionResetError:  # the agent closed the connection: nothing more to send
            record.setdefault("error", "the agent closed the stream early")
        except asyncio.CancelledError:
            record.setdefault("error", "the agent closed the stream early")
            raise
        except self._errors as exc:
            # a status can no longer be sent: raising ends the connection without the final
            # chunk, so the agent sees a truncated stream
            record["error"] = f"upstream stream broke ({_exception_text(exc)})"
            raise
        finally:
            resp.release()
            record.update(latency_s=_since(t0), response_bytes=size, usage=scanner.usage)
            if scanner.tokens is not None and resp.status < 400:
                self._keep_tokens(record, scanner.tokens, continuing)
                if self.token_mode == "on" and record["endpoint"] == "chat" and \
                        not (record.get("tokens") or {}).get("prompt"):
                    self._chat_streams_bare = True  # asked, no prompt ids came: restream the next ones
            self._account(record)
        return out

    async def _passthrough(self, request: web.Request, body: bytes, rest: str, record: dict,
                           t0: float) -> web.Response:
        """Any other path (e.g. /models): forwarded as is, recorded, never counted as a call."""
        try:
            resp, attempts, statuses = await self._send(request.method, self.upstream_url + rest,
                                                        request.query_string, body, self._headers(request, body))
        except _Failure as failure:
            record.update(status=failure.response.status, attempts=failure.attempts, error=failure.error,
                          latency_s=_since(t0))
            self._write(record)
            return failure.response
        try:
            data = await resp.read()
        except self._errors as exc:
            data = b""
            record["error"] = _exception_text(exc)
        finally:
            resp.release()
        record.update(status=resp.status, attempts=attempts, latency_s=_since(t0))
        self._write(record)
        return web.Response(status=resp.status, body=data, headers=_response_headers(resp))

    async def _send(self, method: str, url: str, query: str, content: bytes,
                    headers: dict[str, str]) -> tuple[aiohttp.ClientResponse, int, list]:
        """Send with retries; returns (response with unread body, attempts, statuses per attempt).

        Raises _Failure when no response can be had (unreachable, timeout, budget spent).
        """
        s = self.settings
        if query:
            url = f"{url}?{query}"
        start = time.monotonic()
        deadline = start + s.retry_budget
        statuses: list = []
        attempt = 0
        while True:
            attempt += 1
            wait: float | None = None
            resp = None
            try:
                resp = await self._client.request(method, url, data=content or None, headers=headers,
                                                  allow_redirects=False, proxy=self._via)
            except self._retryable as exc:
                statuses.append(type(exc).__name__)
                unreachable = (f"sandbatch model proxy: upstream {self.upstream_url} not reachable after "
                               f"{attempt} attempt(s) in {time.monotonic() - start:.1f} s ({_exception_text(exc)})")
            except asyncio.TimeoutError as exc:  # no answer within read_timeout: the call may be running
                statuses.append(type(exc).__name__)
                raise _Failure(_error(504, f"sandbatch model proxy: upstream {self.upstream_url} sent nothing for "
                                           f"{s.read_timeout} s (model.proxy.read_timeout)", "upstream_timeout"),
                               _exception_text(exc), attempt, statuses) from None
            except self._errors as exc:
                statuses.append(type(exc).__name__)
                raise _Failure(_error(502, f"sandbatch model proxy: upstream request failed ({_exception_text(exc)})",
                                      "upstream_error"), _exception_text(exc), attempt, statuses) from None
            else:
                statuses.append(resp.status)
                if resp.status not in RETRY_STATUSES:
                    return resp, attempt, statuses
                wait = retry_after(resp.headers) if resp.status == 429 else None
            if wait is None:
                wait = backoff_delay(attempt - 1, s.backoff, s.backoff_max)
            if attempt > s.retries or time.monotonic() + wait > deadline:
                if resp is not None:
                    return resp, attempt, statuses  # the agent sees the upstream's own 429/502/503
                raise _Failure(_error(502, unreachable, "upstream_unreachable"), unreachable, attempt, statuses)
            if resp is not None:
                resp.release()
            await asyncio.sleep(wait)


def _env_proxy(url: str) -> str | None:
    """The HTTP(S)_PROXY that applies to `url`, honouring NO_PROXY (None: connect directly)."""
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    if urllib.request.proxy_bypass_environment(parts.hostname or ""):
        return None
    return urllib.request.getproxies_environment().get(parts.scheme)


def _lower(headers: Mapping[str, str], drop: frozenset[str]) -> dict[str, str]:
    """Headers with lower-cased names, repeated ones joined with ", ", those in `drop` left out."""
    out: dict[str, str] = {}
    for key, value in headers.items():
        key = key.lower()
        if key not in drop:
            out[key] = f"{out[key]}, {value}" if key in out else value
    return out


def _response_headers(resp: aiohttp.ClientResponse) -> dict[str, str]:
    return _lower(resp.headers, _DROP_RESPONSE)


def _exception_text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _since(t0: float) -> float:
    return round(time.monotonic() - t0, 6)
