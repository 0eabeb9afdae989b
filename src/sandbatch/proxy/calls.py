"""What the model proxy keeps of each request: one JSON line per request in model_calls.jsonl
(flushed as written, so a killed job keeps every finished call), the usage found in an
answer or its event stream, the token total the caps count, and with `model.tokens` the
calls' token data (tokens.py).
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from .. import trace
from ..contracts.model_calls import status_failure, usage_of
from . import tokens as token_data


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def since(t0: float) -> float:
    return round(time.monotonic() - t0, 6)


class SSEScanner:
    """Finds usage (and token data) in an SSE byte stream without holding the whole stream.

    Events are parsed only when they may hold what is looked for: usage, or with a
    collector, token data (`every`: all events, as they carry the output too).
    """

    def __init__(self, tokens: token_data.TokenCollector | None, every: bool = False):
        self.tokens = tokens
        self.every = every
        self.usage: dict[str, int] | None = None
        self._buffer = b""

    def feed(self, chunk: bytes) -> None:
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n")
        buffer = self._buffer + chunk
        end = buffer.rfind(b"\n\n")
        if end < 0:
            self._buffer = buffer
            return
        self._buffer = buffer[end + 2:]
        if not self._wanted(buffer):
            return  # the common case: nothing to look at in these events
        for event in buffer[:end].split(b"\n\n"):
            self._event(event)

    def _wanted(self, data: bytes) -> bool:
        if self.tokens is None:
            return b'"usage"' in data
        return self.every or b'"usage"' in data or token_data.MARKER.search(data) is not None

    def _event(self, event: bytes) -> None:
        if not self._wanted(event):
            return
        data = b"\n".join(line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:"))
        if not data or data == b"[DONE]":
            return
        try:
            obj = json.loads(data)
        except ValueError:
            return
        usage = usage_of(obj)
        if usage is not None:
            self.usage = usage  # cumulative when a server reports per chunk: the last one wins
        if self.tokens is not None:
            self.tokens.add(obj)

    def close(self) -> None:
        if self._buffer.strip():
            self._event(self._buffer)
        self._buffer = b""


class CallLog:
    """One proxy's model_calls.jsonl at `path`, and what its calls used.

    token_mode: `model.tokens` (auto, on, off). `tokens`: total tokens reported by the
    upstream so far. Each call is also an LLM span under `trace_parent` (the harness step's).
    `on_outage(failure class)` is called (on the proxy's thread) when `stop_after` calls in a
    row failed for the endpoint's reasons (0: never).
    """

    def __init__(self, path: str | os.PathLike, token_mode: str, trace_parent: Any, stop_after: int = 0):
        self.path = Path(path)
        self.token_mode = token_mode
        self.tokens = 0
        self.stop_after = stop_after
        self.failing = 0  # model calls in a row that failed for the endpoint's reasons
        self.on_outage: Callable[[str], None] | None = None
        self._prompts = token_data.PromptLog()
        self._histories = token_data.PromptLog()
        self._trace_parent = trace_parent
        self._log = None

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.path, "a", encoding="utf-8")

    def close(self) -> None:
        if self._log is not None:
            self._log.close()

    def write(self, record: dict[str, Any]) -> None:
        if self._log is None or self._log.closed:
            return
        self._log.write(json.dumps(record, separators=(",", ":"), ensure_ascii=False, default=str) + "\n")
        self._log.flush()  # a killed job keeps every finished call

    def account(self, record: dict[str, Any]) -> None:
        """Write a model call's record with the endpoint failure its status stands for (unless
        the caller named one), counting its tokens and the endpoint's failures in a row."""
        usage = record.get("usage")
        if usage:
            self.tokens += usage.get("total_tokens", 0)
        status = record.get("status")
        if "endpoint_failure" not in record and isinstance(status, int) and status_failure(status):
            record["endpoint_failure"] = status_failure(status)
        self.write(record)
        trace.model_call(record, self._trace_parent)
        self.failing = self.failing + 1 if record.get("endpoint_failure") else 0
        if self.failing == self.stop_after > 0 and self.on_outage is not None:
            self.on_outage(record["endpoint_failure"])

    def scanner(self) -> SSEScanner:
        """A scanner for a relayed stream, collecting token data unless model.tokens is off."""
        return SSEScanner(token_data.TokenCollector() if self.token_mode != "off" else None,
                          every=self.token_mode == "on")

    def finish(self, record: dict[str, Any], data: bytes, continuing: bool, body: dict[str, Any] | None = None) -> None:
        """Account an unstreamed answer `data`: its usage, error, and token data."""
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            record["usage"] = usage_of(obj)
            if record.get("status", 200) >= 400 and isinstance(obj.get("error"), (dict, str)):
                err = obj["error"]
                record["error"] = (err.get("message") if isinstance(err, dict) else err) or str(err)
            elif self.token_mode != "off":
                collector = token_data.TokenCollector()
                collector.add(obj)
                self.keep_tokens(record, collector, continuing, body)
        else:
            record["usage"] = None
        self.account(record)

    def keep_tokens(self, record: dict[str, Any], collector: token_data.TokenCollector, continuing: bool,
                    body: dict[str, Any] | None = None) -> None:
        """The call's `tokens` (a prompt delta) when they came, and its `output` (for the join)
        and `history` (the digests of the request `body`'s messages as a delta, for the join's
        segments) when they came or were asked for. Called once the answer went out: the
        digests cost a pass over the request."""
        kept = self._prompts.record(record["call"], collector.prompt_token_ids, collector.generation(),
                                    collector.logprobs, continuing)
        if kept is not None:
            record["tokens"] = kept
        if kept is not None or self.token_mode == "on":
            record["output"] = collector.output()
            if body is not None:
                record["history"] = self._histories.delta(record["call"], token_data.history(body))[0]
