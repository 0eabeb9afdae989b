"""An OpenSandbox stand-in: lifecycle API (`/v1`) and the execd subset, served by aiohttp.

Written from the HTTP API the `opensandbox` SDK speaks, so tests and benchmarks can drive
the REAL SDK over real HTTP on 127.0.0.1. A "sandbox" here is a scratch directory, not a
container:

- file APIs map every absolute path into the sandbox's own root (`<root>/<id>/fs/...`),
  so `/testbed` and `/tmp/sandbatch` of two sandboxes never collide;
- commands run as local `bash -c` processes with cwd mapped the same way and
  `SANDBOX_ROOT` set; inside command text, cwd and env values only the prefixes in
  `mapped_prefixes` (default /testbed, /tmp/sandbatch, /workspace) are rewritten. Any
  other absolute path a command touches is the HOST's path, and output shows host paths.
  There is no isolation at all.

Why aiohttp: one dependency gives the server, a streaming multipart reader and direct
access to the TCP transport, which the fault "drop the connection on reuse" needs (an
ASGI app cannot close a connection without answering).

Faults are rules added at runtime (`POST /_faults` or `StandIn.add_fault`), each firing a
bounded number of times on one operation:
  {"op": "create", "action": "status", "status": 503, "count": 2}
  {"op": "create", "action": "status", "status": 429, "retry_after": 1, "count": 1}
  {"op": "create", "action": "delay", "seconds": 3, "visible": true, "count": 1}
      the sandbox exists server-side (visible to list, or only after the delay when
      "visible" is false) while the POST hangs: the leak case when the client times out
  {"op": "exec", "action": "status", "status": 502, "count": 3}   execd not bound yet
  {"op": "endpoint", "action": "status", "status": 404, "code": "KUBERNETES::POD_IP_NOT_AVAILABLE"}
      the sandbox has no address yet (the error body's code; INJECTED_FAULT unless given)
  {"op": "exec", "action": "cut", "count": 1}   the stream breaks after the command started
  {"op": "delete", "action": "gone", "count": 1}   deletes, then answers 404 (expired meanwhile)
  {"op": "*", "action": "drop_on_reuse", "count": 1}   close a kept-alive connection unanswered
  {"op": "get", "action": "drop", "count": 1}           close the connection unanswered
Operations: create get list delete renew patch endpoint metrics exec upload download
info files_delete ping, or "*" / "lifecycle" / "execd" for groups.
`POST /_config {"latency": {"lifecycle": 0.1}}` adds latency to every lifecycle call.
`GET /_stats` reports live sandboxes and how often each command text really started.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import time
import uuid
import weakref
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

EXECD_PORT = 44772
LIFECYCLE_OPS = {"create", "get", "list", "delete", "renew", "patch", "endpoint", "metrics"}
EXECD_OPS = {"exec", "upload", "download", "info", "files_delete", "ping"}
DEFAULT_MAPPED_PREFIXES = ("/testbed", "/tmp/sandbatch", "/workspace")
IMAGE_SKELETON = ("/tmp", "/root", "/workspace")  # no /testbed: images often lack it

_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"code": code, "message": message}, status=status, headers=headers)


def metadata_problem(metadata: dict[str, Any]) -> str | None:
    """Kubernetes label rules for keys and values; `opensandbox.io/` is reserved."""
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            return f"metadata {key!r}: keys and values must be strings"
        if key.startswith("opensandbox.io/"):
            return f"metadata key {key!r} uses the reserved prefix opensandbox.io/"
        prefix, _, name = key.rpartition("/")
        if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
            return f"metadata key {key!r}: invalid prefix"
        if len(name) > 63 or not _LABEL_NAME.match(name):
            return f"metadata key {key!r}: invalid name"
        if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
            return f"metadata value {value!r} of {key!r} is not a valid label value"
    return None


# --- state ---------------------------------------------------------------------------------

@dataclass
class Record:
    id: str
    image: str
    entrypoint: list[str]
    metadata: dict[str, str]
    env: dict[str, str]
    resource_limits: dict[str, str]
    created_at: datetime
    expires_at: datetime | None
    root: Path
    state: str = "Running"
    reason: str | None = None
    message: str | None = None
    procs: set = field(default_factory=set)

    @property
    def fs(self) -> Path:
        return self.root / "fs"

    def to_json(self) -> dict[str, Any]:
        status: dict[str, Any] = {"state": self.state}
        if self.reason:
            status["reason"] = self.reason
        if self.message:
            status["message"] = self.message
        out: dict[str, Any] = {
            "id": self.id,
            "status": status,
            "entrypoint": self.entrypoint,
            "createdAt": _iso(self.created_at),
            "image": {"uri": self.image},
            "metadata": dict(self.metadata),
        }
        # the SDK's parser crashes on "expiresAt": null, so leave it out instead
        if self.expires_at is not None:
            out["expiresAt"] = _iso(self.expires_at)
        return out


@dataclass
class Rule:
    op: str
    action: str
    count: int = 1
    status: int = 500
    code: str = "INJECTED_FAULT"
    retry_after: float | None = None
    seconds: float = 0.0
    visible: bool = True

    def matches(self, op: str) -> bool:
        if self.count <= 0:
            return False
        if self.op in ("*", op):
            return True
        return (self.op == "lifecycle" and op in LIFECYCLE_OPS) or (self.op == "execd" and op in EXECD_OPS)


class State:
    def __init__(self, root: Path, api_key: str | None = None):
        self.root = root
        self.api_key = api_key
        self.sandboxes: dict[str, Record] = {}
        self.rules: list[Rule] = []
        self.latency: dict[str, float] = {"lifecycle": 0.0, "execd": 0.0}
        self.exec_close_delay = 0.0
        self.ping_interval = 3.0
        self.mapped_prefixes: tuple[str, ...] = DEFAULT_MAPPED_PREFIXES
        self.port = 0
        self.reset_counters()
        # requests served per connection, to recognise a reused keep-alive connection
        self.conn_requests: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def reset_counters(self) -> None:
        self.commands: dict[str, int] = {}
        self.commands_per_sandbox: dict[str, dict[str, int]] = {}
        self.requests: dict[str, int] = {}
        self.faults_fired: dict[str, int] = {}
        self.metrics_events = 0
        self.created_total = 0
        self.deleted_total = 0
        self.create_times: list[float] = []  # wall-clock arrival of every create request

    def take_rule(self, op: str, actions: tuple[str, ...]) -> Rule | None:
        for rule in self.rules:
            if rule.action in actions and rule.matches(op):
                rule.count -= 1
                key = f"{op}:{rule.action}"
                self.faults_fired[key] = self.faults_fired.get(key, 0) + 1
                return rule
        return None

    def live(self) -> list[Record]:
        return [r for r in self.sandboxes.values() if r.state not in ("Terminated",)]

    async def remove(self, rec: Record) -> None:
        self.sandboxes.pop(rec.id, None)
        rec.state = "Terminated"
        for proc in list(rec.procs):
            _killpg(proc)
        await asyncio.to_thread(shutil.rmtree, rec.root, True)
        self.deleted_total += 1

    # path mapping ---------------------------------------------------------------------
    def map_path(self, rec: Record, path: str) -> Path:
        """Any path inside the sandbox -> the host path under the sandbox's fs root."""
        norm = os.path.normpath("/" + path.lstrip("/"))
        return rec.fs / norm.lstrip("/")

    def rewrite(self, rec: Record, text: str) -> str:
        """Rewrite the mapped absolute prefixes inside command text or env values."""
        if not self.mapped_prefixes:
            return text
        alternatives = "|".join(re.escape(p) for p in sorted(self.mapped_prefixes, key=len, reverse=True))
        pattern = re.compile(rf"(?<![\w./-])({alternatives})(?=[/\s'\";:)|&<>`$]|$)")
        return pattern.sub(lambda m: str(rec.fs) + m.group(1), text)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _killpg(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _pidfds_work() -> bool:
    try:
        os.close(os.pidfd_open(os.getpid()))
        return True
    except (AttributeError, OSError):  # not Linux >= 5.3, or blocked by seccomp
        return False


PIDFDS = _pidfds_work()


class _Process:
    """A command's process, started on a worker thread and awaited through a pidfd.

    Starting a process holds the starting thread until the child has exec'd, over a
    millisecond each on busy cores; from the event loop that stalled every request the
    stand-in was serving. Offers what run_command uses of asyncio.subprocess.Process.
    """

    def __init__(self, popen: subprocess.Popen, loop: asyncio.AbstractEventLoop):
        self._popen = popen
        self.pid = popen.pid
        self.returncode: int | None = None
        self.stdout = asyncio.StreamReader()
        self.stderr = asyncio.StreamReader()
        self._exited = loop.create_future()

    @classmethod
    async def start(cls, args: list[str], cwd: str, env: dict[str, str]):
        if not PIDFDS:
            return await asyncio.create_subprocess_exec(
                *args, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
        loop = asyncio.get_running_loop()
        spawn = loop.run_in_executor(None, functools.partial(
            subprocess.Popen, args, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True))
        try:
            popen = await asyncio.shield(spawn)
        except asyncio.CancelledError:  # the request went away: its process must not outlive it
            spawn.add_done_callback(lambda f: f.cancelled() or f.exception() or _discard(f.result(), loop))
            raise
        try:
            pidfd = os.pidfd_open(popen.pid)
        except OSError:
            _discard(popen, loop)
            raise
        self = cls(popen, loop)
        loop.add_reader(pidfd, self._on_exit, loop, pidfd)
        try:
            for reader, pipe in ((self.stdout, popen.stdout), (self.stderr, popen.stderr)):
                await loop.connect_read_pipe(lambda reader=reader: asyncio.StreamReaderProtocol(reader), pipe)
        except BaseException:
            _killpg(self)  # then reaped by _on_exit
            raise
        return self

    def _on_exit(self, loop: asyncio.AbstractEventLoop, pidfd: int) -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        self.returncode = self._popen.wait()  # it has exited: this only reaps it
        self._exited.set_result(self.returncode)

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)


def _discard(popen: subprocess.Popen, loop: asyncio.AbstractEventLoop) -> None:
    """Kill a process nobody will read from, and reap it off the event loop."""
    _killpg(popen)
    popen.stdout.close()
    popen.stderr.close()
    loop.run_in_executor(None, popen.wait)


# --- middleware: auth, latency, faults, request counting ---------------------------------

def _op_of(request: web.Request) -> str | None:
    return request.match_info.route.name if request.match_info.route else None


@web.middleware
async def faults_middleware(request: web.Request, handler):
    state: State = request.app["state"]
    op = _op_of(request)
    if op is None or op.startswith("_"):
        return await handler(request)
    state.requests[op] = state.requests.get(op, 0) + 1

    conn = request.transport
    served = state.conn_requests.get(conn, 0) if conn is not None else 0
    if conn is not None:
        state.conn_requests[conn] = served + 1
    reused = served > 0
    if (reused and state.take_rule(op, ("drop_on_reuse",))) or state.take_rule(op, ("drop",)):
        # what a server does when it closes an idle keep-alive connection just as the
        # client sends on it: the request is never processed and nothing is answered
        if request.transport is not None:
            request.transport.close()
        return web.Response(status=499)  # never reaches the client

    group = "lifecycle" if op in LIFECYCLE_OPS else "execd"
    if op != "metrics" and state.latency.get(group):
        await asyncio.sleep(state.latency[group])

    if group == "lifecycle" and state.api_key is not None:
        if request.headers.get("OPEN-SANDBOX-API-KEY") != state.api_key:
            return _error(401, "UNAUTHORIZED", "missing or wrong OPEN-SANDBOX-API-KEY")

    if op != "create":  # create applies its own rules (it must register before delaying)
        rule = state.take_rule(op, ("status", "delay"))
        if rule is not None:
            if rule.action == "delay":
                await asyncio.sleep(rule.seconds)
            else:
                return _status_fault(rule)
    return await handler(request)


def _status_fault(rule: Rule) -> web.Response:
    headers = {"Retry-After": str(int(rule.retry_after))} if rule.retry_after is not None else None
    return _error(rule.status, rule.code, f"injected HTTP {rule.status}", headers)


# --- lifecycle --------------------------------------------------------------------------------

def _record(request: web.Request) -> Record | None:
    state: State = request.app["state"]
    return state.sandboxes.get(request.match_info["sid"])


async def create_sandbox(request: web.Request) -> web.StreamResponse:
    state: State = request.app["state"]
    state.create_times.append(time.time())
    try:
        body = await request.json()
    except ValueError:
        return _error(400, "INVALID_REQUEST", "body is not JSON")
    image = (body.get("image") or {}).get("uri")
    if not image:
        return _error(400, "INVALID_REQUEST", "image.uri is required")
    entrypoint = body.get("entrypoint")
    if not entrypoint:
        return _error(400, "INVALID_REQUEST", "entrypoint is required")
    timeout = body.get("timeout")
    if timeout is not None and (not isinstance(timeout, int) or timeout < 60):
        return _error(400, "INVALID_REQUEST", "timeout must be an integer >= 60 seconds")
    metadata = body.get("metadata") or {}
    problem = metadata_problem(metadata)
    if problem:
        return _error(400, "INVALID_METADATA", problem)

    rule = state.take_rule("create", ("status", "delay"))
    if rule is not None and rule.action == "status":
        return _status_fault(rule)

    sid = str(uuid.uuid4())
    now = _now()
    rec = Record(
        id=sid, image=image, entrypoint=list(entrypoint), metadata=dict(metadata),
        env=dict(body.get("env") or {}), resource_limits=dict(body.get("resourceLimits") or {}),
        created_at=now, expires_at=now + timedelta(seconds=timeout) if timeout else None,
        root=state.root / sid,
    )
    rec.fs.mkdir(parents=True)
    for skeleton in IMAGE_SKELETON:  # what every image here is assumed to contain
        (rec.fs / skeleton.lstrip("/")).mkdir(parents=True, exist_ok=True)
    if rule is not None and rule.action == "delay":
        async def slow_create() -> None:
            if rule.visible:
                rec.state = "Pending"
                state.sandboxes[sid] = rec
                state.created_total += 1
            await asyncio.sleep(rule.seconds)
            if not rule.visible:
                state.sandboxes[sid] = rec
                state.created_total += 1
            if state.sandboxes.get(sid) is rec:  # unless deleted while it was pending
                rec.state = "Running"

        # shielded: the sandbox comes up even when the client gave up waiting (the leak case)
        await asyncio.shield(asyncio.ensure_future(slow_create()))
    else:
        state.sandboxes[sid] = rec
        state.created_total += 1
    return web.json_response(rec.to_json(), status=202)


async def get_sandbox(request: web.Request) -> web.Response:
    rec = _record(request)
    if rec is None:
        return _error(404, "SANDBOX_NOT_FOUND", f"sandbox {request.match_info['sid']} not found")
    return web.json_response(rec.to_json())


async def list_sandboxes(request: web.Request) -> web.Response:
    state: State = request.app["state"]
    q = request.query
    try:
        page = int(q.get("page", "1"))
        page_size = int(q.get("pageSize", "20"))
    except ValueError:
        return _error(400, "INVALID_REQUEST", "page and pageSize must be integers")
    if page < 1 or not 1 <= page_size <= 200:
        return _error(400, "INVALID_REQUEST", "page >= 1 and 1 <= pageSize <= 200")
    states = {s.lower() for s in q.getall("state", [])}
    wanted = dict(parse_qsl(q.get("metadata", ""), keep_blank_values=True))
    items = [
        r for r in sorted(state.sandboxes.values(), key=lambda r: (r.created_at, r.id))
        if (not states or r.state.lower() in states)
        and all(r.metadata.get(k) == v for k, v in wanted.items())
    ]
    total = len(items)
    pages = max(1, -(-total // page_size))
    chunk = items[(page - 1) * page_size: page * page_size]
    return web.json_response({
        "items": [r.to_json() for r in chunk],
        "pagination": {"page": page, "pageSize": page_size, "totalItems": total,
                       "totalPages": pages, "hasNextPage": page < pages},
    })


async def delete_sandbox(request: web.Request) -> web.Response:
    state: State = request.app["state"]
    rec = _record(request)
    if rec is None:
        return _error(404, "SANDBOX_NOT_FOUND", f"sandbox {request.match_info['sid']} not found")
    await state.remove(rec)
    if state.take_rule("delete", ("gone",)):
        # the sandbox went away (expiry) between the client's decision and its DELETE
        return _error(404, "SANDBOX_NOT_FOUND", f"sandbox {rec.id} not found")
    return web.Response(status=204)


async def renew_sandbox(request: web.Request) -> web.Response:
    rec = _record(request)
    if rec is None:
        return _error(404, "SANDBOX_NOT_FOUND", f"sandbox {request.match_info['sid']} not found")
    body = await request.json()
    try:
        rec.expires_at = datetime.fromisoformat(str(body["expiresAt"]).replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return _error(400, "INVALID_REQUEST", "expiresAt must be an RFC 3339 time")
    return web.json_response({"expiresAt": _iso(rec.expires_at)})


async def patch_metadata(request: web.Request) -> web.Response:
    rec = _record(request)
    if rec is None:
        return _error(404, "SANDBOX_NOT_FOUND", f"sandbox {request.match_info['sid']} not found")
    patch = await request.json()
    merged = dict(rec.metadata)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    problem = metadata_problem(merged)
    if problem:
        return _error(400, "INVALID_METADATA", problem)
    rec.metadata = merged
    return web.json_response(rec.to_json())


async def get_endpoint(request: web.Request) -> web.Response:
    state: State = request.app["state"]
    rec = _record(request)
    if rec is None:
        return _error(404, "SANDBOX_NOT_FOUND", f"sandbox {request.match_info['sid']} not found")
    port = int(request.match_info["port"])
    if port == EXECD_PORT:
        return web.json_response({"endpoint": f"127.0.0.1:{state.port}/execd/{rec.id}"})
    return web.json_response({"endpoint": f"127.0.0.1:{state.port}/ports/{rec.id}/{port}"})


async def metrics_event(request: web.Request) -> web.Response:
    state: State = request.app["state"]
    state.metrics_events += 1
    await request.read()
    return web.Response(status=204)


# --- execd ------------------------------------------------------------------------------------

def _execd_record(request: web.Request) -> tuple[Record | None, web.Response | None]:
    """The sandbox behind an execd URL; a dead one answers 502 like the proxy in front of it."""
    rec = _record(request)
    if rec is None or rec.state != "Running":
        return None, _error(502, "BAD_GATEWAY", "sandbox is not reachable")
    return rec, None


async def ping(request: web.Request) -> web.Response:
    rec, err = _execd_record(request)
    return err or web.Response(text="pong")


def _event(kind: str, **fields: Any) -> bytes:
    fields["type"] = kind
    fields["timestamp"] = int(time.time() * 1000)
    # execd's framing: one bare JSON object per frame, frames separated by a blank line
    return json.dumps(fields).encode() + b"\n\n"


class _Lines:
    """execd's line splitting: lines without terminators, a blank line as "\\n", CR ends a line."""

    def __init__(self):
        self.buf = bytearray()
        self.last_cr = False

    def feed(self, data: bytes, final: bool = False) -> list[str]:
        out: list[str] = []
        for b in data:
            if b in (10, 13):
                if self.buf:
                    out.append(self.buf.decode("utf-8", "replace"))
                    self.buf.clear()
                elif not (b == 10 and self.last_cr):
                    out.append("\n")
                self.last_cr = b == 13
                continue
            self.last_cr = False
            self.buf.append(b)
        if final and self.buf:
            out.append(self.buf.decode("utf-8", "replace"))
            self.buf.clear()
        return out


async def run_command(request: web.Request) -> web.StreamResponse:
    state: State = request.app["state"]
    rec, err = _execd_record(request)
    if err:
        return err
    try:
        body = await request.json()
    except ValueError:
        return _error(400, "INVALID_REQUEST", "body is not JSON")
    command, argv = body.get("command"), body.get("argv")
    if bool(command) == bool(argv):
        return _error(400, "INVALID_REQUEST", "exactly one of command and argv is required")
    if body.get("background"):
        return _error(400, "INVALID_REQUEST", "background commands are not supported by the stand-in")
    text = command if command else " ".join(argv)
    timeout_ms = body.get("timeout")

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
           "HOME": str(rec.fs / "root"), "SANDBOX_ROOT": str(rec.fs)}
    env.update({k: state.rewrite(rec, v) for k, v in rec.env.items()})
    env.update({k: state.rewrite(rec, str(v)) for k, v in (body.get("envs") or {}).items()})
    cwd = state.map_path(rec, body["cwd"]) if body.get("cwd") else rec.fs
    args = ["bash", "-c", state.rewrite(rec, command)] if command else [state.rewrite(rec, a) for a in argv]

    if not cwd.is_dir():  # as the real execd answers, before any stream
        return _error(400, "INVALID_REQUEST_BODY", f"invalid request, validation error working directory "
                      f"does not exist: {body['cwd']}: stat {body['cwd']}: no such file or directory")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    lock = asyncio.Lock()

    async def send(chunk: bytes) -> None:
        async with lock:
            await resp.write(chunk)

    execution_id = uuid.uuid4().hex
    started = time.monotonic()
    proc = await _Process.start(args, str(cwd), env)
    state.commands[text] = state.commands.get(text, 0) + 1
    per = state.commands_per_sandbox.setdefault(rec.id, {})
    per[text] = per.get(text, 0) + 1
    rec.procs.add(proc)
    await send(_event("init", text=execution_id))
    if state.take_rule("exec", ("cut",)):
        # the stream breaks after the command started: it ran, and the client cannot know
        # how it ended; execd kills a command whose client went away
        request.transport.close()
        _killpg(proc)
        await proc.wait()
        rec.procs.discard(proc)
        return resp

    async def pump(stream: asyncio.StreamReader, kind: str) -> None:
        lines = _Lines()
        while True:
            data = await stream.read(65536)
            for line in lines.feed(data, final=not data):
                await send(_event(kind, text=line))
            if not data:
                return

    async def keepalive() -> None:
        while True:
            await asyncio.sleep(state.ping_interval)
            await send(_event("ping", text="pong"))

    pinger = asyncio.create_task(keepalive())
    try:
        async def finish() -> int:
            await asyncio.gather(pump(proc.stdout, "stdout"), pump(proc.stderr, "stderr"))
            return await proc.wait()

        # the timeout bounds the process, not only its output (a command that redirects its
        # output closes the pipes long before it ends)
        done = asyncio.ensure_future(finish())
        try:
            rc = await asyncio.wait_for(asyncio.shield(done), timeout=timeout_ms / 1000 if timeout_ms else None)
        except asyncio.TimeoutError:
            _killpg(proc)
            rc = await done
        if rc < 0:
            rc = -1  # killed by a signal: execd (Go's ExitCode) reports -1
        if rc == 0:
            last = _event("execution_complete", execution_time=int((time.monotonic() - started) * 1000))
        else:
            last = _event("error", error={"ename": "CommandExecError", "evalue": str(rc),
                                          "traceback": [f"exit status {rc}"]})
        pinger.cancel()
        if state.exec_close_delay:
            await send(last)
            await asyncio.sleep(state.exec_close_delay)
        else:
            async with lock:
                await resp.write_eof(last)  # the last event and the stream's end in one write
    finally:
        pinger.cancel()
        # a client that went away kills its command, as execd does
        if proc.returncode is None:
            _killpg(proc)
            await proc.wait()
        rec.procs.discard(proc)
    return resp


async def upload_files(request: web.Request) -> web.Response:
    state: State = request.app["state"]
    rec, err = _execd_record(request)
    if err:
        return err
    reader = await request.multipart()
    meta: dict[str, Any] | None = None
    written = 0
    while True:
        part = await reader.next()
        if part is None:
            break
        if part.name == "metadata":
            meta = json.loads(await part.text())
        elif part.name == "file":
            if meta is None or not meta.get("path"):
                return _error(400, "INVALID_REQUEST", "a file part must follow its metadata part")
            target = state.map_path(rec, meta["path"])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(await part.read(decode=False))
            mode = meta.get("mode")
            if mode is not None:
                # execd's mode is octal digits written as a decimal number (644 = rw-r--r--)
                target.chmod(int(str(mode), 8))
            meta = None
            written += 1
    return web.json_response({"files": written})


async def download_file(request: web.Request) -> web.StreamResponse:
    state: State = request.app["state"]
    rec, err = _execd_record(request)
    if err:
        return err
    path = request.query.get("path", "")
    target = state.map_path(rec, path)
    if not target.is_file():
        return _error(404, "FILE_NOT_FOUND", f"{path}: no such file")
    data = target.read_bytes()
    rng = request.headers.get("Range")
    m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng or "")
    if m and (m.group(1) or m.group(2)):
        start = int(m.group(1)) if m.group(1) else max(0, len(data) - int(m.group(2)))
        end = int(m.group(2)) if m.group(1) and m.group(2) else len(data) - 1
        part = data[start:end + 1]
        return web.Response(body=part, status=206, content_type="application/octet-stream",
                            headers={"Content-Range": f"bytes {start}-{start + len(part) - 1}/{len(data)}"})
    return web.Response(body=data, content_type="application/octet-stream")


async def files_info(request: web.Request) -> web.Response:
    state: State = request.app["state"]
    rec, err = _execd_record(request)
    if err:
        return err
    out = {}
    for path in request.query.getall("path", []):
        target = state.map_path(rec, path)
        if not target.exists():
            return _error(404, "FILE_NOT_FOUND", f"{path}: no such file")
        st = target.stat()
        out[path] = {
            "path": path, "size": st.st_size,
            "modified_at": _iso(datetime.fromtimestamp(st.st_mtime, timezone.utc)),
            "created_at": _iso(datetime.fromtimestamp(st.st_ctime, timezone.utc)),
            "owner": "root", "group": "root", "mode": int(oct(st.st_mode & 0o7777)[2:]),
            "type": "directory" if target.is_dir() else "file",
        }
    return web.json_response(out)


async def delete_files(request: web.Request) -> web.Response:
    state: State = request.app["state"]
    rec, err = _execd_record(request)
    if err:
        return err
    for path in request.query.getall("path", []):
        target = state.map_path(rec, path)
        if target.is_file() or target.is_symlink():
            target.unlink()
    return web.Response(status=200)


# --- control (tests and benchmarks only) ------------------------------------------------------

async def control_stats(request: web.Request) -> web.Response:
    state: State = request.app["state"]
    return web.json_response({
        "live": len(state.live()),
        "ids": sorted(r.id for r in state.live()),
        "states": {r.id: r.state for r in state.sandboxes.values()},
        "commands": state.commands,
        # per sandbox: the same text legitimately runs once in each of many sandboxes
        "commands_per_sandbox": state.commands_per_sandbox,
        "requests": state.requests,
        "faults_fired": state.faults_fired,
        "faults_pending": [vars(r) for r in state.rules if r.count > 0],
        "metrics_events": state.metrics_events,
        "create_times": state.create_times,
        "created_total": state.created_total,
        "deleted_total": state.deleted_total,
        "server_cpu_s": time.process_time(),
        # the processes of finished commands (with in_thread(): every child of the process)
        "commands_cpu_s": _children_cpu(),
    })


async def control_faults(request: web.Request) -> web.Response:
    state: State = request.app["state"]
    if request.method == "DELETE":
        state.rules.clear()
        return web.json_response({"rules": 0})
    body = await request.json()
    for rule in body.get("rules", [body]):
        state.rules.append(Rule(**rule))
    return web.json_response({"rules": len(state.rules)})


async def control_config(request: web.Request) -> web.Response:
    state: State = request.app["state"]
    body = await request.json()
    if "latency" in body:
        state.latency.update({k: float(v) for k, v in body["latency"].items()})
    if "exec_close_delay" in body:
        state.exec_close_delay = float(body["exec_close_delay"])
    if "ping_interval" in body:
        state.ping_interval = float(body["ping_interval"])
    if "mapped_prefixes" in body:
        state.mapped_prefixes = tuple(body["mapped_prefixes"])
    if "api_key" in body:
        state.api_key = body["api_key"]
    return web.json_response({"latency": state.latency, "exec_close_delay": state.exec_close_delay})


async def control_reset(request: web.Request) -> web.Response:
    state: State = request.app["state"]
    body = await request.json() if request.can_read_body else {}
    state.rules.clear()
    state.reset_counters()
    state.latency = {"lifecycle": 0.0, "execd": 0.0}
    state.exec_close_delay = 0.0
    state.ping_interval = 3.0
    state.api_key = None
    state.mapped_prefixes = DEFAULT_MAPPED_PREFIXES
    removed = 0
    if body.get("sandboxes"):
        for rec in list(state.sandboxes.values()):
            await state.remove(rec)
            removed += 1
    return web.json_response({"removed": removed})


async def control_fail(request: web.Request) -> web.Response:
    """Make a sandbox die like an OOM kill: processes killed, state Failed, reason given."""
    state: State = request.app["state"]
    rec = _record(request)
    if rec is None:
        return _error(404, "SANDBOX_NOT_FOUND", "no such sandbox")
    body = await request.json() if request.can_read_body else {}
    rec.state = "Failed"
    rec.reason = body.get("reason", "OOMKilled")
    rec.message = body.get("message", "container was killed")
    for proc in list(rec.procs):
        _killpg(proc)
    return web.json_response(rec.to_json())


async def control_expire(request: web.Request) -> web.Response:
    state: State = request.app["state"]
    rec = _record(request)
    if rec is None:
        return _error(404, "SANDBOX_NOT_FOUND", "no such sandbox")
    await state.remove(rec)
    return web.Response(status=204)


async def _expiry_loop(app: web.Application):
    state: State = app["state"]

    async def loop():
        while True:
            await asyncio.sleep(0.5)
            now = _now()
            for rec in list(state.sandboxes.values()):
                if rec.expires_at is not None and rec.expires_at <= now:
                    await state.remove(rec)

    task = asyncio.create_task(loop())
    yield
    task.cancel()
    for rec in list(state.sandboxes.values()):
        for proc in list(rec.procs):
            _killpg(proc)


def build_app(root: Path, api_key: str | None = None) -> web.Application:
    app = web.Application(middlewares=[faults_middleware], client_max_size=1024 ** 3)
    app["state"] = State(root, api_key)
    app.cleanup_ctx.append(_expiry_loop)
    r = app.router
    r.add_post("/v1/sandboxes", create_sandbox, name="create")
    r.add_get("/v1/sandboxes", list_sandboxes, name="list")
    r.add_get("/v1/sandboxes/{sid}", get_sandbox, name="get")
    r.add_delete("/v1/sandboxes/{sid}", delete_sandbox, name="delete")
    r.add_post("/v1/sandboxes/{sid}/renew-expiration", renew_sandbox, name="renew")
    r.add_patch("/v1/sandboxes/{sid}/metadata", patch_metadata, name="patch")
    r.add_get("/v1/sandboxes/{sid}/endpoints/{port}", get_endpoint, name="endpoint")
    r.add_post("/v1/metrics/events", metrics_event, name="metrics")
    r.add_get("/execd/{sid}/ping", ping, name="ping")
    r.add_post("/execd/{sid}/command", run_command, name="exec")
    r.add_post("/execd/{sid}/files/upload", upload_files, name="upload")
    r.add_get("/execd/{sid}/files/download", download_file, name="download")
    r.add_get("/execd/{sid}/files/info", files_info, name="info")
    r.add_delete("/execd/{sid}/files", delete_files, name="files_delete")
    r.add_get("/_stats", control_stats, name="_stats")
    r.add_post("/_faults", control_faults, name="_faults")
    r.add_delete("/_faults", control_faults, name="_faults_clear")
    r.add_post("/_config", control_config, name="_config")
    r.add_post("/_reset", control_reset, name="_reset")
    r.add_post("/_sandboxes/{sid}/fail", control_fail, name="_fail")
    r.add_post("/_sandboxes/{sid}/expire", control_expire, name="_expire")
    return app
