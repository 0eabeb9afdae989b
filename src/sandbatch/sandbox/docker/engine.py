"""The Docker Engine API over its socket, through docker-py's low-level client.

Why the API and not one `docker` CLI process per call: the CLI process alone costs 12-16
ms of host CPU per call (a Go binary starting, its config and API negotiation), the same
call through the socket 0.5-4 ms (benchmarks/host_cpu.py measures both; docs/concurrency.md).
A rollout makes 20-30 such calls. docker-py is imported once per run by the step server, so
its import (~0.1 s) is paid once, not per step.

docker-py blocks: each call runs in a thread (asyncio.to_thread). A command's output is
read from the exec's own socket (the engine's multiplexed stream), so a command's stdin
can be fed and a stuck stream can be cut (shutdown) from the event loop.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from typing import Any, Protocol

import docker
import docker.errors
import requests.exceptions

from ...core.failures import FailureClass
from ..base import SandboxError

ENGINE_DOWN = ("Docker engine not reachable ({}); start it with scripts/services/docker.sh")


class NotFound(Exception):
    """The engine does not know the container or image (HTTP 404)."""


class EngineError(SandboxError):
    """The engine refused a call; `status` is its HTTP status."""

    def __init__(self, message: str, status: int | None):
        super().__init__(message, "sandbox")
        self.status = status


class Engine:
    """Blocking docker-py calls, made async; engine trouble becomes SandboxError, 404 NotFound."""

    def __init__(self, options: dict[str, Any], timeout: float):
        self.options = options  # the provider's: `host` is read at each call
        self.timeout = timeout
        self._api: docker.APIClient | None = None
        self._host = ""

    @property
    def api(self) -> docker.APIClient:
        host = self.options.get("host") or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        if self._api is None or self._host != host:
            # made on first use: a provider is built before the step server forks
            try:
                self._api = docker.APIClient(base_url=host, version="auto", timeout=int(self.timeout))
                self._host = host
            except docker.errors.DockerException as exc:
                raise SandboxError(ENGINE_DOWN.format(_short(exc)), FailureClass.SANDBOX) from None
        return self._api

    async def call(self, method: str, /, *args: Any, **kwargs: Any) -> Any:
        """docker-py's APIClient.<method>(*args, **kwargs) in a thread."""
        return await asyncio.to_thread(self.sync, method, *args, **kwargs)

    def sync(self, method: str, /, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self.api, method)(*args, **kwargs)
        except docker.errors.NotFound as exc:
            raise NotFound(_short(exc)) from None
        except docker.errors.APIError as exc:
            raise EngineError(f"docker engine: {method} failed: {_short(exc)}", exc.status_code) from None
        except (requests.exceptions.ConnectionError, docker.errors.DockerException) as exc:
            raise SandboxError(ENGINE_DOWN.format(_short(exc)), FailureClass.SANDBOX) from None
        except requests.exceptions.Timeout:
            raise SandboxError(f"docker engine: {method} did not answer within {self.timeout:g} s",
                               FailureClass.SANDBOX) from None

    # --- commands ---------------------------------------------------------------------

    async def exec_start(self, container: str, argv: list[str], *, cwd: str, env: dict[str, str],
                         stdin: bool) -> "ExecStream":
        made = await self.call("exec_create", container, argv, stdin=stdin, workdir=cwd, environment=env)
        sock = await self.call("exec_start", made["Id"], socket=True)
        return ExecStream(self, made["Id"], sock)


class EngineOwner(Protocol):
    """What a sandbox (sandbox.py) and the image builder (images.py) use of their provider,
    provider.py's DockerProvider, which imports them."""

    options: dict[str, Any]
    prefix: str  # of every label the provider sets
    engine: Engine
    slow_engine: Engine  # pulls and commits

    async def inspect(self, name: str) -> dict[str, Any] | None: ...

    async def delete(self, sandbox_id: str) -> bool: ...


class ExecStream:
    """One running command: feed its stdin, read its output to the end, or cut it off."""

    def __init__(self, engine: Engine, exec_id: str, sock: Any):
        self.engine, self.id = engine, exec_id
        self._io = sock  # docker-py's socket file; its raw socket does the writing
        self._sock: socket.socket = getattr(sock, "_sock", sock)
        self._sock.settimeout(None)  # commands run for as long as their own timeout says
        self._read = _stream_reader(sock, self._sock)

    def communicate(self, data: bytes | None, out: bytearray, err: bytearray) -> None:
        """Blocking: send `data` (then end the command's stdin), read stdout and stderr to the end."""
        try:
            if data is not None:
                try:
                    self._sock.sendall(data)
                    self._sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass  # the command ended without reading all of its input
            header = bytearray()
            while True:  # the engine's frames: 1 byte stream, 3 padding, 4 bytes length
                while len(header) < 8:
                    chunk = self._read(8 - len(header))
                    if not chunk:
                        return
                    header += chunk
                kind, size = header[0], struct.unpack(">I", header[4:8])[0]
                header.clear()
                target = err if kind == 2 else out
                while size:
                    chunk = self._read(min(size, 1 << 16))
                    if not chunk:
                        return
                    target += chunk
                    size -= len(chunk)
        except OSError:
            return  # cut off (cancel) or the connection broke: the exit code tells

    def cut(self) -> None:
        """Stop reading: wakes a blocked communicate()."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        self.cut()
        for closable in (self._sock, self._io):
            try:
                closable.close()
            except OSError:
                pass

    async def exit_code(self) -> int | None:
        """The command's exit status; None when the engine has none (the container died under it)."""
        try:
            info = await self.engine.call("exec_inspect", self.id)
        except NotFound:
            return None
        return None if info.get("Running") else info.get("ExitCode")


def _stream_reader(sock: Any, raw: socket.socket) -> Any:
    """How to read the exec's stream: through the buffered reader http.client parsed the
    engine's upgrade response with, when docker-py kept it. That reader reads ahead past the
    headers, so the first frames of the stream (a quick command's whole output) can already
    sit in its buffer, where a read of the raw socket never sees them: about 1 exec in 150
    came back empty that way. The Docker CLI reads a hijacked connection through its bufio
    reader for the same reason."""
    response = getattr(sock, "_response", None)  # docker-py keeps the response on the socket it returns
    reader = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
    if reader is not None and getattr(reader, "raw", None) is sock and hasattr(reader, "read1"):
        return reader.read1  # the buffer first, then at most one read of the socket
    return raw.recv


def _short(exc: BaseException, n: int = 300) -> str:
    text = " ".join(str(getattr(exc, "explanation", None) or exc).split())
    return text if len(text) <= n else text[:n] + "..."
