"""A minimal HTTP/1.1 server on asyncio streams, and a runner that hosts it in a thread.

Why not aiohttp or uvicorn: the proxy and the scripted model need only "read one JSON
request, answer with a body or a stream of chunks". The standard library does that with
no import cost in every harness job (aiohttp.web adds ~0.2 CPU-s per process) and with
less per-request work than a framework's routing and middleware layers.

Supported: keep-alive, Content-Length and chunked request bodies, `Expect: 100-continue`,
fixed-length and chunked (streamed) responses. Not supported: pipelining beyond
sequential requests on one connection, upgrades, HTTP/2, TLS (everything is local).
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Protocol

_REASONS = {
    100: "Continue", 200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
    404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large",
    422: "Unprocessable Entity", 429: "Too Many Requests", 500: "Internal Server Error",
    502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout",
}
_MAX_HEAD = 1 << 20  # request line + headers
_MAX_BODY = 256 << 20  # a long agent conversation is a few MB; refuse absurd bodies


@dataclass(slots=True)
class Request:
    method: str
    path: str  # without the query string
    query: str
    headers: dict[str, str]  # lower-cased names; repeated headers joined with ", "
    body: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass(slots=True)
class Response:
    """A complete response. `after` runs once the bytes are handed to the socket."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    after: Callable[[], Any] | None = None


@dataclass(slots=True)
class StreamingResponse:
    """A chunked response; the server closes `chunks` (aclose) however the stream ends."""

    status: int
    headers: dict[str, str]
    chunks: AsyncIterator[bytes]


def json_response(status: int, obj: Any, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(status, body, {"content-type": "application/json", **(headers or {})})


Handler = Callable[[Request], Awaitable["Response | StreamingResponse"]]


class _BadRequest(Exception):
    pass


def _head(status: int, headers: dict[str, str], extra: str) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode("latin-1")


async def _read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise _BadRequest("incomplete request head") from None
        return None  # the client closed an idle keep-alive connection
    except asyncio.LimitOverrunError:
        raise _BadRequest("request head too large") from None
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, _version = lines[0].split(" ", 2)
    except ValueError:
        raise _BadRequest(f"bad request line {lines[0][:80]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise _BadRequest(f"bad header line {line[:80]!r}")
        name = name.strip().lower()
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    path, _, query = target.partition("?")
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    else:
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise _BadRequest("bad Content-Length") from None
        if length < 0 or length > _MAX_BODY:
            raise _BadRequest("request body too large")
        body = await reader.readexactly(length) if length else b""
    return Request(method.upper(), path, query, headers, body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise _BadRequest("bad chunk size") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return b"".join(parts)
        total += size
        if total > _MAX_BODY:
            raise _BadRequest("request body too large")
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


class HTTPServer:
    """Serves `handler` on (host, port); port 0 picks a free port (see `.port`)."""

    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 0):
        self.handler = handler
        self.host = host
        self.port = port
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._connection, self.host, self.port, limit=_MAX_HEAD, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            while True:
                try:
                    request = await _read_request(reader, writer)
                except _BadRequest as exc:
                    writer.write(_error_bytes(400, str(exc), close=True))
                    await writer.drain()
                    return
                if request is None:
                    return
                keep_alive = request.headers.get("connection", "").lower() != "close"
                if not await self._respond(request, writer, keep_alive) or not keep_alive:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # close() cancels open connections; ending normally keeps asyncio's stream
            # callback from logging the cancellation as an error
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _respond(self, request: Request, writer: asyncio.StreamWriter, keep_alive: bool) -> bool:
        """Write one response; False when the connection must close."""
        try:
            response = await self.handler(request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a handler bug must not kill the server
            writer.write(_error_bytes(500, f"{type(exc).__name__}: {exc}", close=False))
            await writer.drain()
            return True
        conn = "keep-alive" if keep_alive else "close"
        if isinstance(response, Response):
            headers = {**response.headers, "content-length": str(len(response.body)), "connection": conn}
            writer.write(_head(response.status, headers, "") + response.body)
            await writer.drain()
            if response.after is not None:
                response.after()  # the handler's own bookkeeping; its errors are its own
            return True
        chunks = response.chunks
        try:
            headers = {**response.headers, "transfer-encoding": "chunked", "connection": conn}
            writer.write(_head(response.status, headers, ""))
            async for chunk in chunks:
                if chunk:
                    writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except (asyncio.CancelledError, ConnectionError):
            raise
        except Exception:
            # the producer failed mid-stream: a status can no longer be sent, so end the
            # connection without the final chunk and the client sees a truncated stream
            return False
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()
        return True


def _error_bytes(status: int, message: str, close: bool) -> bytes:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": None}}).encode()
    headers = {"content-type": "application/json", "content-length": str(len(body))}
    if close:
        headers["connection"] = "close"
    return _head(status, headers, "") + body


class App(Protocol):
    """What `ServerThread` hosts: a handler plus setup/teardown run on the server's loop."""

    async def startup(self) -> None: ...
    async def handle(self, request: Request) -> Response | StreamingResponse: ...
    async def shutdown(self) -> None: ...


class ServerThread:
    """Runs an App's server on its own event loop in a daemon thread.

    The caller's loop (the harness job's) never runs proxy work, so a busy job cannot
    delay the agent's model calls, and the proxy never blocks the job.
    """

    def __init__(self, app: App, host: str = "127.0.0.1", port: int = 0, name: str = "http-server"):
        self.app = app
        self.host = host
        self.port = port
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def start(self, timeout: float = 30.0) -> int:
        """Start and wait until listening; returns the bound port. Re-raises startup errors."""
        if self._thread is not None:
            raise RuntimeError(f"{self.name} already started")
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"{self.name} did not start within {timeout} s")
        if self._error is not None:
            self._thread.join()
            raise self._error
        return self.port

    def stop(self, timeout: float = 30.0) -> None:
        """Stop serving, run the app's shutdown, and join the thread. Idempotent."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:  # loop already closed
                pass
        thread.join(timeout)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # surfaced to start() if it happened before ready
            if not self._ready.is_set():
                self._error = exc
        finally:
            self._ready.set()
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        await self.app.startup()
        server = HTTPServer(self.app.handle, self.host, self.port)
        try:
            await server.start()
            self.port = server.port
            self._ready.set()
            await self._stop.wait()
        finally:
            await server.close()
            await self.app.shutdown()
