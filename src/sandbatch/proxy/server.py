"""Serving an aiohttp.web handler, on the caller's loop or on its own in a daemon thread."""

from __future__ import annotations

import asyncio
import threading
from typing import Awaitable, Callable

from aiohttp import web

# a long agent conversation is a few MB; larger bodies are refused with 413
MAX_BODY = 256 << 20

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Hook = Callable[[], Awaitable[None]]


def catch_all(handler: Handler, startup: Hook | None = None, shutdown: Hook | None = None) -> web.Application:
    """An application sending every method and path to `handler`, with setup and teardown hooks."""
    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_route("*", "/{path:.*}", handler)
    if startup is not None:
        app.on_startup.append(lambda _app: startup())
    if shutdown is not None:
        app.on_cleanup.append(lambda _app: shutdown())
    return app


async def listen(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Start serving `app` on (host, port) on the running loop; port 0 picks a free one.

    Returns the runner (`await runner.cleanup()` stops it) and the bound port.
    """
    # stopping waits at most a second for calls in flight: the rollout using them is over
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, reuse_address=True)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, runner.addresses[0][1]


class ServerThread:
    """Serves an application on its own event loop in a daemon thread.

    The caller's loop (the harness job's) never runs server work, so a busy job cannot
    delay the agent's model calls, and the server never blocks the job.
    """

    def __init__(self, app: web.Application, host: str = "127.0.0.1", port: int = 0, name: str = "http-server"):
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
        """Stop serving, run the application's cleanup, and join the thread. Idempotent."""
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
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # surfaced to start() if it happened before ready
            if not self._ready.is_set():
                self._error = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        runner, self.port = await listen(self.app, self.host, self.port)
        try:
            self._ready.set()
            await self._stop.wait()
        finally:
            await runner.cleanup()
