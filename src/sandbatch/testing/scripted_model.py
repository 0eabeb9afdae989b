"""A deterministic OpenAI-compatible model server driven by a per-task script (a test tool).

For tests and demos of harnesses without a real model; a run never uses it: Chat Completions (with tool
calls, streamed or not), Responses (streamed or not), /v1/models and vLLM's /tokenize.

    sandbatch-scripted-model --script SCRIPT.yaml --port 8011 [--record calls.jsonl]

The script's format: script.py; how a conversation is read and tokenized: template.py; the
answers in each API's shape, with token ids and logprobs as vLLM sends them: answers.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any, Iterable

from aiohttp import web

from ..core.errors import UserError
from ..proxy.server import ServerThread, catch_all, listen
from ..proxy.settings import split_path
from . import answers
from .script import Script, ToolCall
from .template import (Reply, assistant_turns, content_text, last_user_text, render_prompt, request_messages,
                       tool_names, user_texts)


class ScriptedModel:
    """Serves a Script over HTTP: `app()` is the aiohttp.web application, `serve()` runs it in a thread."""

    def __init__(self, script: Script, record_path: str | Path | None = None):
        self.script = script
        self.record_path = Path(record_path) if record_path else None
        self.requests: list[dict[str, Any]] = []  # every request received, for in-process tests
        self.reported_usage: list[dict[str, int]] = []  # (prompt, completion) of every reply sent
        self._record = None

    def app(self) -> web.Application:
        return catch_all(self.handle, self.startup, self.shutdown)

    def serve(self, host: str = "127.0.0.1", port: int = 0) -> ServerThread:
        server = ServerThread(self.app(), host, port, name="scripted-model")
        server.start()
        return server

    async def startup(self) -> None:
        if self.record_path is not None:
            self.record_path.parent.mkdir(parents=True, exist_ok=True)
            self._record = open(self.record_path, "a", encoding="utf-8")

    async def shutdown(self) -> None:
        if self._record is not None:
            self._record.close()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            return _json(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
        entry = {"time": time.time(), "method": request.method, "path": request.path,
                 "headers": {k.lower(): v for k, v in request.headers.items()}, "body": body}
        self.requests.append(entry)
        if self._record is not None:
            self._record.write(json.dumps(entry) + "\n")
            self._record.flush()
        endpoint, rest = split_path(request.path)
        if rest == "/tokenize" and request.method == "POST" and isinstance(body, dict):
            # vLLM's tokenizer endpoint (at the server's root): a chat's prompt as the template renders it
            ids = render_prompt(request_messages(body), self.script.drop_history_reasoning)
            return _json(200, {"count": len(ids), "max_model_len": self.script.max_model_len or 0, "tokens": ids})
        if endpoint == "models":
            return _json(200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": "sandbatch",
                 **({"max_model_len": self.script.max_model_len} if self.script.max_model_len else {})}
                for m in self.script.models]})
        if endpoint not in ("chat", "responses") or request.method != "POST" or not isinstance(body, dict):
            return _json(404, {"error": {"message": f"no such endpoint: {request.method} {request.path}",
                                         "type": "invalid_request_error"}})
        reply = self.reply(body)
        stream = body.get("stream") is True
        if endpoint == "chat":
            if stream:
                return await _sse(request, answers.chat_chunks(reply, body, self.reported_usage,
                                                               self.script.stream_tokens))
            return _json(200, answers.chat(reply, body, self.reported_usage))
        if stream:
            return await _sse(request, answers.responses_events(reply, body, self.reported_usage))
        return _json(200, answers.response(reply, body, self.reported_usage))

    # which reply ------------------------------------------------------------------------

    def reply(self, body: dict[str, Any]) -> Reply:
        messages = request_messages(body)
        offered = tool_names(body)
        prompt_ids = render_prompt(messages, self.script.drop_history_reasoning)
        model = str(body.get("model") or self.script.models[0])
        system = "\n".join(content_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
        turn = self.script.reply_for(last_user_text(messages))
        if turn is None and not offered and re.search(r"\btitle\b", system, re.IGNORECASE):
            return Reply(self.script.title, "", [], "stop", prompt_ids, model)
        index = assistant_turns(messages)
        # the first user message a task matches: some agents (Codex) send their environment
        # as a user message before the task's
        task = next(filter(None, map(self.script.task_for, user_texts(messages))), None)
        turns = task.turns if task else self.script.default
        if turn is None:
            turn = turns[index] if index < len(turns) else \
                (task.final if task and task.final else None) or self.script.final
        calls = [self._resolve(call, offered, call.id or f"call_{index}_{i}") for i, call in enumerate(turn.tool_calls)]
        finish = turn.finish_reason or ("tool_calls" if calls else "stop")
        return Reply(turn.content or "", turn.reasoning_content or "", calls, finish, prompt_ids, model)

    def _resolve(self, call: ToolCall, offered: list[str], call_id: str) -> tuple[str, str, str]:
        """The call under a tool the request offers: the named one, else the first fallback offered."""
        name, args = call.name, call.arguments
        if offered and name not in offered:
            for alt in self.script.fallbacks.get(name, []):
                if alt.name in offered:
                    name = alt.name
                    if isinstance(args, dict):
                        args = {alt.rename.get(k, k): v for k, v in args.items()}
                        args.update(alt.extra)
                    break
        return call_id, name, args if isinstance(args, str) else json.dumps(args)



def _json(status: int, obj: Any) -> web.Response:
    return web.json_response(obj, status=status, dumps=lambda o: json.dumps(o, separators=(",", ":")))


async def _sse(request: web.Request, events: Iterable[tuple[str | None, Any]]) -> web.StreamResponse:
    """Send `events` as a server-sent event stream, one chunk per event."""
    out = web.StreamResponse(headers={"content-type": "text/event-stream", "cache-control": "no-cache"})
    await out.prepare(request)
    for sequence, (name, data) in enumerate(events):
        if isinstance(data, dict) and name is not None:
            data = {"type": name, "sequence_number": sequence, **data}
        payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        head = f"event: {name}\n" if name else ""
        await out.write(f"{head}data: {payload}\n\n".encode())
    await out.write_eof()
    return out


# --- command line -------------------------------------------------------------------------

async def _main(args: argparse.Namespace) -> None:
    model = ScriptedModel(Script.load(args.script), args.record)
    runner, port = await listen(model.app(), args.host, args.port)
    print(f"scripted model listening on http://{args.host}:{port}/v1", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sandbatch-scripted-model", description=__doc__.split("\n")[0])
    parser.add_argument("--script", required=True, help="YAML/JSON script: task key -> assistant turns")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (0 = a free one; printed on start)")
    parser.add_argument("--record", default=None, help="append every received request to this JSONL file")
    args = parser.parse_args(argv)
    try:
        asyncio.run(_main(args))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
