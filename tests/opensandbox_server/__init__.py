"""A local OpenSandbox stand-in server (see app.py for what it fakes).

The opensandbox tests run against the REAL server (tests/real_opensandbox.py), with faults
injected by a proxy in front of it (tests/opensandbox_proxy.py). The stand-in is kept only
for what neither can produce here:
- a sandbox the server reports `Failed` with a reason (`OOMKilled`): a whole-sandbox OOM
  kill cannot be provoked on the real Docker runtime of this machine;
- 64 creates at once from 8 processes, to time create admission (tests/test_create_admission.py):
  64 real containers at once would swamp this shared machine; the stand-in's cost nothing
  (429/503 answers to admission run on the real server);
- the client-only throughput figure (benchmarks/sandbox_throughput.py): a server with no
  containers and a fixed injected latency, so the client's own cost shows.

    with StandIn.in_thread() as server:          # or StandIn.in_subprocess()
        server.add_fault(op="create", action="status", status=503, count=2)
        ... drive the real SDK at server.domain ...
        assert server.stats()["live"] == 0

Both modes bind 127.0.0.1 on a free port and are controlled over HTTP (`/_stats`,
`/_faults`, `/_config`, `/_reset`), so a test talks to either the same way. The subprocess
mode gives the server its own interpreter (and core), which the benchmark needs.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


class StandIn:
    def __init__(self, port: int, stop, root: Path):
        self.port = port
        self.domain = f"127.0.0.1:{port}"
        self.url = f"http://{self.domain}"
        self._stop = stop
        self.root = root

    # --- start / stop ---------------------------------------------------------------------
    @classmethod
    def in_thread(cls, root: str | os.PathLike | None = None, keepalive_timeout: float = 5.0) -> "StandIn":
        """Serve from an event loop in a daemon thread of this process."""
        from aiohttp import web

        from .app import build_app

        root_path = Path(root or tempfile.mkdtemp(prefix="opensandbox-standin-"))
        started = threading.Event()
        holder: dict[str, Any] = {}
        loop = asyncio.new_event_loop()

        async def start() -> None:
            app = build_app(root_path)
            runner = web.AppRunner(app, handler_cancellation=True, keepalive_timeout=keepalive_timeout,
                                   access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
            await site.start()
            holder["runner"] = runner
            holder["port"] = runner.addresses[0][1]
            app["state"].port = holder["port"]

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(start())
            started.set()
            loop.run_forever()
            loop.run_until_complete(holder["runner"].cleanup())
            loop.close()

        thread = threading.Thread(target=run, name="opensandbox-standin", daemon=True)
        thread.start()
        if not started.wait(30):
            raise RuntimeError("the OpenSandbox stand-in did not start")

        def stop() -> None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)

        return cls(holder["port"], stop, root_path)

    @classmethod
    def in_subprocess(cls, root: str | os.PathLike | None = None, keepalive_timeout: float = 5.0) -> "StandIn":
        """Serve from `python -m opensandbox_server` in a child process."""
        root_path = Path(root or tempfile.mkdtemp(prefix="opensandbox-standin-"))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
        proc = subprocess.Popen(
            [sys.executable, "-m", "opensandbox_server", "--root", str(root_path),
             "--keepalive-timeout", str(keepalive_timeout)],
            stdout=subprocess.PIPE, stdin=subprocess.PIPE, env=env, text=True,
        )
        line = proc.stdout.readline()
        if not line.startswith("LISTENING "):
            proc.kill()
            raise RuntimeError(f"the OpenSandbox stand-in did not start: {line!r}")

        def stop() -> None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

        return cls(int(line.split()[1]), stop, root_path)

    def stop(self) -> None:
        self._stop()

    def __enter__(self) -> "StandIn":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- control --------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "/_stats")

    def add_fault(self, **rule: Any) -> None:
        self._call("POST", "/_faults", rule)

    def clear_faults(self) -> None:
        self._call("DELETE", "/_faults")

    def configure(self, **settings: Any) -> None:
        self._call("POST", "/_config", settings)

    def reset(self, sandboxes: bool = False) -> None:
        self._call("POST", "/_reset", {"sandboxes": sandboxes})

    def fail_sandbox(self, sandbox_id: str, reason: str = "OOMKilled") -> None:
        self._call("POST", f"/_sandboxes/{sandbox_id}/fail", {"reason": reason})

    def expire_sandbox(self, sandbox_id: str) -> None:
        self._call("POST", f"/_sandboxes/{sandbox_id}/expire")

    def runs_of(self, marker: str) -> int:
        """How many times commands whose text contains `marker` really started."""
        return sum(n for text, n in self.stats()["commands"].items() if marker in text)

    def host_path(self, sandbox_id: str, path: str) -> Path:
        """Where a sandbox path lives on this host."""
        return self.root / sandbox_id / "fs" / path.lstrip("/")


__all__ = ["StandIn"]
