"""`python -m opensandbox_server`: serve the stand-in on 127.0.0.1 and print `LISTENING <port>`.

Stops on SIGTERM/SIGINT or when its standard input closes (so it never outlives a parent
that died without stopping it).
"""

from __future__ import annotations

import argparse
import asyncio
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


if __name__ == "__main__":
    asyncio.run(main())
