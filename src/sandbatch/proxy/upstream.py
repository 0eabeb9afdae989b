"""The model proxy's side toward the upstream endpoint: one aiohttp client session, the
headers forwarded each way, retries with backoff, and the OpenAI-style errors the agent
gets when the upstream cannot answer.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Mapping

import aiohttp
from aiohttp import web

from ..core.failures import FailureClass
from ..core.util import backoff_delay

if TYPE_CHECKING:
    from ..core.config import ProxyConfig

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


def error_response(status: int, message: str, code: str, kind: str = "proxy_error") -> web.Response:
    """An OpenAI-style error answer to the agent."""
    return web.json_response({"error": {"message": message, "type": kind, "param": None, "code": code}},
                             status=status)


class Failure(Exception):
    """The upstream could not answer; carries the response for the agent and the record, and
    the endpoint failure it is (contracts.model_calls.ENDPOINT_FAILURES)."""

    def __init__(self, response: web.Response, error: str, attempts: int, statuses: list, failure_class: FailureClass):
        super().__init__(error)
        self.response = response
        self.error = error
        self.attempts = attempts
        self.statuses = statuses
        self.failure_class = failure_class


class Upstream:
    """The upstream endpoint at `url` (its base URL, normally ending in /v1), reached with
    `api_key` (kept in memory only) as `settings` (model.proxy) say. Open on the loop that
    uses it (`open()` / `close()`)."""

    def __init__(self, url: str, api_key: str | None, settings: "ProxyConfig"):
        self.url = url
        self.settings = settings
        self._api_key = api_key
        self._client: aiohttp.ClientSession | None = None

    def open(self) -> None:
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
        self._via = env_proxy(self.url)
        # connect failures, refused or dropped connections (a stale keep-alive too): retried
        self._retryable = (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError,
                           aiohttp.ClientOSError, aiohttp.ConnectionTimeoutError)
        # what reading an answer may raise besides
        self.errors = (aiohttp.ClientError, asyncio.TimeoutError)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    def headers(self, request: web.Request | None, body: bytes, anthropic: bool = False) -> dict[str, str]:
        """The agent's request headers as sent upstream: its credentials replaced by the upstream
        key (None: a request of the proxy's own, e.g. the preflight's model list); `anthropic`:
        a Messages call passed through, the key also as Anthropic's `x-api-key`."""
        headers = _lower(request.headers if request is not None else {}, _DROP_REQUEST)
        headers["accept-encoding"] = "identity"  # bytes are relayed as they come
        if body:
            headers.setdefault("content-type", "application/json")
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
            if anthropic:
                headers["x-api-key"] = self._api_key
        return headers

    async def send(self, method: str, url: str, query: str, content: bytes,
                   headers: dict[str, str]) -> tuple[aiohttp.ClientResponse, int, list]:
        """Send with retries; returns (response with unread body, attempts, statuses per attempt).

        Raises Failure when no response can be had (unreachable, timeout, budget spent).
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
                unreachable = (f"sandbatch model proxy: upstream {self.url} not reachable after "
                               f"{attempt} attempt(s) in {time.monotonic() - start:.1f} s ({exception_text(exc)})")
            except asyncio.TimeoutError as exc:  # no answer within read_timeout: the call may be running
                statuses.append(type(exc).__name__)
                raise Failure(error_response(504, f"sandbatch model proxy: upstream {self.url} sent nothing for "
                                         f"{s.read_timeout} s (model.proxy.read_timeout)", "upstream_timeout"),
                              exception_text(exc), attempt, statuses, FailureClass.MODEL_UNAVAILABLE) from None
            except self.errors as exc:
                statuses.append(type(exc).__name__)
                raise Failure(error_response(502, f"sandbatch model proxy: upstream request failed ({exception_text(exc)})",
                                             "upstream_error"),
                              exception_text(exc), attempt, statuses, FailureClass.MODEL_UNAVAILABLE) from None
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
                raise Failure(error_response(502, unreachable, "upstream_unreachable"), unreachable, attempt, statuses,
                              FailureClass.MODEL_UNREACHABLE)
            if resp is not None:
                resp.release()
            await asyncio.sleep(wait)


def env_proxy(url: str) -> str | None:
    """The HTTP(S)_PROXY that applies to `url`, honouring NO_PROXY (None: connect directly)."""
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


def response_headers(resp: aiohttp.ClientResponse) -> dict[str, str]:
    """The upstream's answer headers as relayed to the agent."""
    return _lower(resp.headers, _DROP_RESPONSE)


def exception_text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
