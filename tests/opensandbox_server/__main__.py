"""`python -m opensandbox_server`: serve the stand-in on 127.0.0.1 and print `LISTENING <port>`.

Stops on SIGTERM/SIGINT or when its standard input closes (so it never outlives a parent
that died without stopping it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path

from aiohttp import web

from .app import build_app


async def main() -> None:
    parser = argparse.ArgumentParser(prog="opensandbox_server")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--root", default=None, help="scratch directory for sandbox roots")
    parser.add_argument("--api-key", default=None, help="require this OPEN-SANDBOX-API-KEY")
    parser.add_argument("--keepalive-timeout", type=float, default=5.0)
    args = parser.parse_args()

    root = Path(args.root or tempfile.mkdtemp(prefix="opensandbox-standin-"))
    app = build_app(root, args.api_key)
    runner = web.AppRunner(app, handler_cancellation=True, keepalive_timeout=args.keepalive_timeout,
                           access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port, backlog=1024)
    await site.start()
    port = runner.addresses[0][1]
    app["state"].port = port
    print(f"LISTENING {port}", flush=True)

    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)

    def watch_stdin() -> None:
        sys.stdin.read()
        loop.call_soon_threadsafe(done.set)

    if not sys.stdin.isatty():
        threading.Thread(target=watch_stdin, daemon=True).start()
    await done.wait()
    await runner.cleanup()


def use_pidfd_child_watcher() -> None:
    """Wait for commands through pidfds, as Python 3.12+ does by default where it can.

    3.11's default watcher starts a thread per command and blocks the event loop until
    that thread runs; a pidfd is one more file descriptor on the loop.
    """
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # kernel without pidfds (before 5.3) or blocked by seccomp
        return
    asyncio.set_child_watcher(asyncio.PidfdChildWatcher())


if __name__ == "__main__":
    use_pidfd_child_watcher()
    asyncio.run(main())
