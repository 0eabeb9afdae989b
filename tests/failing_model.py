"""A real model server that fails the way a test needs: it lists its model and answers the
first `good` model calls of each task as the scripted model does, then, per task (matched on
the prompt), answers with an HTTP status (503, 401, ...) or closes its listener for good
(`"refuse"`: every later call meets a refused connection)."""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Any, Iterator

from aiohttp import web

from sandbatch.proxy.server import ServerThread, catch_all
from sandbatch.proxy.settings import split_path
from sandbatch.testing.script import Script
from sandbatch.testing.scripted_model import ScriptedModel
from sandbatch.testing.template import first_user_text, request_messages


class FailingModel:
    """failures: task prompt substring -> (good calls answered first, then a status or "refuse")."""

    def __init__(self, script: dict[str, Any], failures: dict[str, tuple[int, int | str]]):
        self.scripted = ScriptedModel(Script.from_dict(script))
        self.failures = failures
        self.calls: dict[str, int] = {}  # model calls per task
        self.requests: list[dict[str, Any]] = []  # (path, authorization header) of each request
        self.server: ServerThread | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append({"path": request.path, "authorization": request.headers.get("Authorization")})
        if split_path(request.path)[0] not in ("chat", "responses"):
            return await self.scripted.handle(request)  # the model list
        body = json.loads(await request.read())
        prompt = first_user_text(request_messages(body))
        task = next((t for t in self.failures if t in prompt), None)
        if task is None:
            return await self.scripted.handle(request)
        good, failure = self.failures[task]
        self.calls[task] = self.calls.get(task, 0) + 1
        if self.calls[task] <= good:
            return await self.scripted.handle(request)
        if failure == "refuse":  # stop listening (on another thread: stopping waits for this call)
            threading.Thread(target=self.server.stop, daemon=True).start()
            request.transport.close()  # this call meets a reset connection
            return web.Response(status=500)
        return web.json_response({"error": {"message": f"failing on purpose with {failure}", "type": "server_error"}},
                                 status=int(failure))


@contextlib.contextmanager
def failing_model(script: dict[str, Any],
                  failures: dict[str, tuple[int, int | str]]) -> Iterator[tuple[str, FailingModel]]:
    """A FailingModel serving on 127.0.0.1: yields (base URL, the model)."""
    model = FailingModel(script, failures)
    model.server = ServerThread(catch_all(model.handle), "127.0.0.1", 0, name="failing-model")
    port = model.server.start()
    try:
        yield f"http://127.0.0.1:{port}/v1", model
    finally:
        model.server.stop()
