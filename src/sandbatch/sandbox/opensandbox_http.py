"""An httpx transport that sends over aiohttp, for the `opensandbox` SDK's HTTP clients.

The SDK speaks httpx and takes any httpx transport (`ConnectionConfig.transport`); every
client it builds shares that one. With 64 sandboxes at once, httpx's own transport
(httpcore on anyio) took about half of the client's CPU: a cancel scope around every
socket read and write, a scan of the pool with a socket poll per idle connection on
every request and every response close, a pure-Python HTTP parser. aiohttp's client
does the same on asyncio directly, with a C parser and idle connections kept per host.

Kept as httpx would have it, because the SDK and the provider depend on it:
- failures raise httpx's exception types: the SDK's retry policy and the provider's
  "did the request reach the server" test classify them (connect errors and pool or
  connect timeouts mean nothing was sent);
- timeouts come per request from `request.extensions["timeout"]` (pool + connect,
  connect, read; aiohttp has no write timeout, so writes are bounded by the callers'
  own deadlines);
- response bodies stream (command output is a server-sent event stream) and reach
  httpx undecoded, with their raw headers;
- no cookies, redirects or environment proxies (the SDK's clients use none either).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator

import aiohttp
import httpx
from yarl import URL


def _timeout(request: httpx.Request) -> aiohttp.ClientTimeout:
    t = request.extensions.get("timeout") or {}
    pool, connect = t.get("pool"), t.get("connect")
    # aiohttp's `connect` covers waiting for a pooled connection and opening a new one
    return aiohttp.ClientTimeout(total=None, connect=None if pool is None or connect is None else pool + connect,
                                 sock_connect=connect, sock_read=t.get("read"))


def _httpx_error(exc: BaseException, request: httpx.Request) -> httpx.TransportError:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):  # no connection within the pool + connect timeouts
        return httpx.ConnectTimeout(text, request=request)
    if isinstance(exc, asyncio.TimeoutError):  # sock_read: the server sent nothing in time
        return httpx.ReadTimeout(text, request=request)
    if isinstance(exc, aiohttp.ClientConnectorError):  # refused, unresolvable, TLS handshake
        return httpx.ConnectError(text, request=request)
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError,
                        aiohttp.ClientResponseError)):  # closed early, or not valid HTTP
        return httpx.RemoteProtocolError(text, request=request)
    if isinstance(exc, aiohttp.InvalidURL):
        return httpx.UnsupportedProtocol(text, request=request)
    if isinstance(exc, aiohttp.ClientConnectionError):  # reset, or another socket error
        return httpx.ReadError(text, request=request)
    return httpx.TransportError(text, request=request)


class _Body(httpx.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request):
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise _httpx_error(exc, self._request) from exc

    async def aclose(self) -> None:
        if self._response.content.at_eof():
            self._response.release()  # the connection goes back to the pool
        else:
            self._response.close()  # unread bytes would corrupt the next response


class AiohttpTransport(httpx.AsyncBaseTransport):
    """One connection pool, made on first use in the running event loop and bound to it."""

    def __init__(self, *, max_connections: int, keepalive_expiry: float, ssl_context: ssl.SSLContext | None = None):
        self._max_connections = max_connections
        self._keepalive_expiry = keepalive_expiry
        self._ssl: ssl.SSLContext | bool = ssl_context or True  # True: aiohttp's verifying default
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._max_connections, limit_per_host=0,
                                             keepalive_timeout=self._keepalive_expiry, ssl=self._ssl)
            # httpx has set every header and decodes bodies itself
            self._session = aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
                timeout=aiohttp.ClientTimeout(total=None))
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        headers = request.headers.multi_items()
        if isinstance(request.stream, httpx.ByteStream):
            body: bytes | httpx.AsyncByteStream | None = request.content or None
        else:
            # e.g. a multipart upload, sent as it is read: with its length when httpx knows it,
            # else chunked, which aiohttp frames itself
            body = request.stream
            headers = [(k, v) for k, v in headers if k != "transfer-encoding"]
        try:
            response = await self._client().request(
                request.method, URL(str(request.url), encoded=True), headers=headers,
                data=body, allow_redirects=False, timeout=_timeout(request))
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise _httpx_error(exc, request) from exc
        return httpx.Response(
            status_code=response.status, headers=response.raw_headers, stream=_Body(response, request),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": (response.reason or "").encode("latin-1")})

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


__all__ = ["AiohttpTransport"]
