"""A fault-injecting HTTP proxy in front of the real OpenSandbox server.

Every request the SDK makes passes through it. The lifecycle API (`/v1/...`) is
forwarded to the server as it is; the answers to endpoint lookups are rewritten so that
execd's traffic comes through the proxy too (`/_execd/<host:port>/<path>` is forwarded to
`http://<host:port>/<path>`). So the faults below hit the real protocol, and what the
server and execd do about them (a sandbox made by a POST whose answer never arrived, a
command killed when its stream is cut) is the real thing.

Faults are rules, each firing a bounded number of times (`count`) on one operation:

  {"op": "create", "action": "status", "status": 503}              answered here, not forwarded
  {"op": "create", "action": "status", "status": 429, "retry_after": 1}
  {"op": "exec", "action": "status", "status": 502}                 execd not bound yet
  {"op": "endpoint", "action": "status", "status": 404, "code": "KUBERNETES::POD_IP_NOT_AVAILABLE"}
      the error body's code (INJECTED_FAULT unless given)
  {"op": "create", "action": "delay", "seconds": 5}
      forwarded at once (the sandbox exists), answered only after `seconds`: a create
      slower than the client's timeout; with "forward_late": true it is forwarded only
      after the delay (the sandbox appears after the client gave up)
  {"op": "create", "action": "drop"}                                closed unanswered, not forwarded
  {"op": "exec", "action": "cut"}   forwarded; the stream is cut after the command started
  {"op": "exec", "action": "unfinished"}   forwarded; the stream ends cleanly without the
      command's exit status (its `error` and `execution_complete` events held back), as
      execd's stream can end when it stops a command at its timeout on a loaded host
  {"op": "exec", "action": "ended"}   forwarded; the stream ends cleanly right after the command
      started, which runs on: what execd's own proxy does when its inner hop fails (docs/providers.md)
  {"op": "get", "action": "drop_on_reuse"}   a kept-alive connection closed as it is reused
  {"op": "delete", "action": "gone"}         forwarded, answered 404 (it expired meanwhile)

Operations: create list get delete renew patch endpoint metrics (lifecycle); exec upload
download ping info files_delete (execd); "*" for any. `stats()` counts requests per
operation and when each arrived (wall clock), commands forwarded to each sandbox and fired
rules.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}
_SANDBOX = re.compile(r"^/v1/sandboxes/[^/]+$")
_ENDPOINT = re.compile(r"^/v1/sandboxes/[^/]+/endpoints/\d+$")
_EXECD_OPS = {("POST", "command"): "exec", ("POST", "files/upload"): "upload", ("GET", "files/download"): "download",
              ("GET", "ping"): "ping", ("GET", "files/info"): "info", ("DELETE", "files"): "files_delete"}


def _lifecycle_op(method: str, path: str) -> str:
    if path == "/v1/sandboxes":
        return "create" if method == "POST" else "list"
    if _SANDBOX.match(path):
        return {"GET": "get", "DELETE": "delete"}.get(method, "other")
    if _ENDPOINT.match(path):
        return "endpoint"
    if path.endswith("/renew-expiration"):
        return "renew"
    if path.endswith("/metadata"):
        return "patch"
    return "metrics" if "metrics" in path else "other"


def _execd_op(method: str, rest: str) -> str:
    for (m, suffix), op in _EXECD_OPS.items():
        if method == m and (rest == suffix or rest.endswith("/" + suffix)):
            return op
    return "other"


@dataclass
class _Rule:
    op: str
    action: str
    count: int = 1
    status: int = 503
    retry_after: float | None = None
    code: str = "INJECTED_FAULT"
    seconds: float = 0.0
    forward_late: bool = False


class FaultProxy:
    """Serves from an event loop in a daemon thread; `domain` is what the SDK connects to."""

    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []
        self._served: dict[int, int] = {}  # requests per client connection
        self._pending: set[asyncio.Task] = set()  # forwards that outlive their client
        self.reset()
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name="opensandbox-fault-proxy",
                                        daemon=True)
        self._thread.start()
        if not started.wait(30):
            raise RuntimeError("the fault proxy did not start")
        self.domain = f"127.0.0.1:{self.port}"

    # --- control (from the test's thread) ----------------------------------------------
    def add_fault(self, **rule: Any) -> None:
        with self._lock:
            self._rules.append(_Rule(**rule))

    def clear_faults(self) -> None:
        with self._lock:
            self._rules.clear()

    def reset(self) -> None:
        with self._lock:
            self._rules = []
            self.requests: dict[str, int] = {}
            self.arrivals: dict[str, list[float]] = {}  # operation -> time.time() of each request
            self.fired: dict[str, int] = {}
            self.commands: dict[str, dict[str, int]] = {}  # execd address -> command text -> times forwarded

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"requests": dict(self.requests), "arrivals": {k: list(v) for k, v in self.arrivals.items()},
                    "faults_fired": dict(self.fired),
                    "faults_pending": [r.__dict__ for r in self._rules if r.count > 0],
                    "commands": {k: dict(v) for k, v in self.commands.items()}}

    def wait_answered(self, bound: float) -> None:
        """Until the server has answered every request whose client gave up on it (a `delay`
        fault's); `bound`: the seconds such a request may take, its delay included."""
        deadline = time.monotonic() + bound
        while self._pending:  # the proxy's loop removes each one as its answer comes
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self._pending)} requests forwarded to {self.upstream} still "
                                     f"unanswered after {bound:.0f} s; {self.stats()['requests']}")
            time.sleep(0.1)

    def sent_twice(self, ignore_prefix: str | tuple[str, ...]) -> dict[str, int]:
        """Commands forwarded to the same sandbox's execd more than once (texts starting
        with `ignore_prefix`, or one of them, excepted)."""
        return {f"{where}: {text}": n for where, per in self.stats()["commands"].items()
                for text, n in per.items() if n > 1 and not text.startswith(ignore_prefix)}

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- serving ----------------------------------------------------------------------------
    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        async def start():
            self._session = aiohttp.ClientSession(auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None),
                                                  connector=aiohttp.TCPConnector(limit=0))
            app = web.Application(client_max_size=1 << 30)
            app.router.add_route("*", "/{tail:.*}", self._handle)
            self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = self._runner.addresses[0][1]

        async def cleanup():
            await self._runner.cleanup()
            await self._session.close()

        self._loop.run_until_complete(start())
        started.set()
        self._loop.run_forever()
        self._loop.run_until_complete(cleanup())
        self._loop.close()

    def _take(self, op: str, actions: tuple[str, ...]) -> _Rule | None:
        with self._lock:
            for rule in self._rules:
                if rule.count > 0 and rule.action in actions and rule.op in (op, "*"):
                    rule.count -= 1
                    key = f"{op}:{rule.action}"
                    self.fired[key] = self.fired.get(key, 0) + 1
                    return rule
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path.startswith("/_execd/"):
            hostport, _, rest = path[len("/_execd/"):].partition("/")
            target = f"http://{hostport}/{rest}"
            op = _execd_op(request.method, rest)
        else:
            target = self.upstream + path
            op = _lifecycle_op(request.method, path)
        if request.query_string:
            target += "?" + request.query_string
        body = await request.read()
        conn = id(request.transport)
        with self._lock:
            self.requests[op] = self.requests.get(op, 0) + 1
            self.arrivals.setdefault(op, []).append(time.time())
            served = self._served.get(conn, 0)
            self._served[conn] = served + 1

        if (served and self._take(op, ("drop_on_reuse",))) or self._take(op, ("drop",)):
            return self._drop(request)
        rule = self._take(op, ("status", "delay", "cut", "unfinished", "ended", "gone"))
        if rule is not None and rule.action == "status":
            headers = {"Retry-After": str(rule.retry_after)} if rule.retry_after is not None else None
            return web.json_response({"code": rule.code, "message": f"injected {rule.status}"},
                                     status=rule.status, headers=headers)
        if rule is not None and rule.action == "delay":
            # the forwarded request goes on when the client gives up (the server acts anyway)
            answer = self._detached(self._forward_buffered(request, op, target, body), rule.seconds if
                                    rule.forward_late else 0.0)
            await asyncio.sleep(rule.seconds)
            return await asyncio.shield(answer)
        if rule is not None and rule.action == "gone":
            await self._forward_buffered(request, op, target, body)
            return web.json_response({"code": "SANDBOX_NOT_FOUND", "message": "gone"}, status=404)
        try:
            action = rule.action if rule is not None else None
            return await self._forward(request, op, target, body, cut=action == "cut",
                                       unfinished=action == "unfinished", ended=action == "ended")
        except aiohttp.ClientConnectorError as exc:
            # what a gateway answers when the sandbox's port is not bound yet
            return web.json_response({"code": "BAD_GATEWAY", "message": str(exc)}, status=502)

    def _detached(self, coro, delay: float) -> asyncio.Future:
        async def later():
            await asyncio.sleep(delay)
            try:
                return await coro
            except aiohttp.ClientError as exc:  # e.g. the sandbox was deleted meanwhile
                return web.json_response({"code": "BAD_GATEWAY", "message": str(exc)}, status=502)

        task = asyncio.ensure_future(later())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    @staticmethod
    def _drop(request: web.Request) -> web.Response:
        # what a server does when it closes a connection as the client sends on it
        if request.transport is not None:
            request.transport.close()
        return web.Response(status=499)  # never reaches the client

    def _count_command(self, op: str, target: str, body: bytes) -> None:
        if op != "exec":
            return
        try:
            text = json.loads(body).get("command") or ""
        except ValueError:
            return
        where = target.split("/")[2]  # the sandbox's execd address
        with self._lock:
            per = self.commands.setdefault(where, {})
            per[text] = per.get(text, 0) + 1

    def _upstream(self, request: web.Request, target: str, body: bytes):
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP]
        return self._session.request(request.method, target, headers=headers, data=body or None,
                                     allow_redirects=False)

    def _rewrite(self, op: str, status: int, raw: bytes) -> bytes:
        if op != "endpoint" or status != 200:
            return raw
        answer = json.loads(raw)
        endpoint = answer.get("endpoint", "")
        scheme, sep, rest = endpoint.rpartition("://")
        answer["endpoint"] = f"{scheme}{sep}{self.domain}/_execd/{rest}"
        return json.dumps(answer).encode()

    async def _forward_buffered(self, request: web.Request, op: str, target: str, body: bytes) -> web.Response:
        self._count_command(op, target, body)
        async with self._upstream(request, target, body) as up:
            raw = self._rewrite(op, up.status, await up.read())
            headers = [(k, v) for k, v in up.headers.items() if k.lower() not in _HOP]
            return web.Response(status=up.status, body=raw, headers=headers)

    async def _forward(self, request: web.Request, op: str, target: str, body: bytes,
                       cut: bool = False, unfinished: bool = False, ended: bool = False) -> web.StreamResponse:
        if op == "endpoint":
            return await self._forward_buffered(request, op, target, body)
        self._count_command(op, target, body)
        async with self._upstream(request, target, body) as up:
            resp = web.StreamResponse(status=up.status, reason=up.reason)
            for k, v in up.headers.items():
                if k.lower() not in _HOP:
                    resp.headers.add(k, v)
            await resp.prepare(request)
            seen = b""
            pending = b""
            async for chunk in up.content.iter_any():
                if unfinished:  # whole events only, the exit status's held back
                    pending += chunk
                    *events, pending = pending.split(b"\n\n")
                    chunk = b"".join(e + b"\n\n" for e in events if not _ends_the_command(e))
                if ended:  # whole events up to the command's start; then the stream ends, cleanly,
                    # and the command runs on (execd sees its caller go away as the upstream closes)
                    pending += chunk
                    *events, pending = pending.split(b"\n\n")
                    for event in events:
                        await resp.write(event + b"\n\n")
                        if b'"init"' in event:
                            await resp.write_eof()
                            return resp
                    continue
                await resp.write(chunk)
                seen += chunk
                if cut and b'"init"' in seen:
                    # the command has started: the client loses its stream, execd sees its
                    # caller go away (when this handler returns and closes the upstream)
                    await asyncio.sleep(0.5)
                    if request.transport is not None:
                        request.transport.close()
                    return resp
            if unfinished and pending and not _ends_the_command(pending):
                await resp.write(pending)
            await resp.write_eof()
            return resp


def _ends_the_command(event: bytes) -> bool:
    """An event of execd's stream that carries the command's exit status (SSE `data:` lines, or
    execd's bare JSON framing)."""
    lines = event.strip().split(b"\n")
    data = b"".join(line[5:].strip() for line in lines if line.startswith(b"data:")) or b"".join(lines)
    try:
        return json.loads(data or b"{}").get("type") in ("error", "execution_complete")
    except ValueError:
        return False


__all__ = ["FaultProxy"]
