"""Small helpers shared by every step: deep merge, atomic writes, JSON lines."""

from __future__ import annotations

import copy
import json
import os
import random
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

from . import killpoint

if TYPE_CHECKING:
    import asyncio


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Return base with override merged in: mappings merge recursively, the rest is replaced."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write via a temporary file and rename, so a crash never leaves a half-written output."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    killpoint.reached(f"wrote-{path.name}")


def write_if_changed(path: str | os.PathLike, text: str) -> None:
    """write_atomic, only when the file does not already hold `text`: its mtime then moves
    only on a real change (what Snakemake's rerun triggers and a user's rerun rely on)."""
    try:
        if Path(path).read_text(encoding="utf-8") == text:
            return
    except OSError:
        pass
    write_atomic(path, text)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def jsonl(rows: Iterable[Any]) -> str:
    return "".join(json.dumps(r, default=str) + "\n" for r in rows)


def write_jsonl(path: str | os.PathLike, rows: Iterable[Any]) -> None:
    write_atomic(path, jsonl(rows))


def iter_jsonl(path: str | os.PathLike) -> Iterator[Any]:
    """Yield the JSON values of a JSON-lines file, skipping blank lines."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def json_object(raw: Any, key: str) -> dict[str, Any]:
    """Tool-call arguments as the object APIs want: the JSON object `raw` holds (or is), else
    `raw` kept under `key` (arguments that are not an object, or not JSON)."""
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        value = raw
    return value if isinstance(value, dict) else {key: value}


def duration_text(seconds: float) -> str:
    """A duration as people read it: 45s, 3m07s, 1h02m00s."""
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def unawaited(future: "asyncio.Future[Any]") -> "asyncio.Future[Any]":
    """Mark the exception `future` may end with as taken, for a future whose awaiter may give up
    on it (a timeout, a cancellation): asyncio would log "exception was never retrieved" whenever
    the collector frees it, in the middle of whatever code runs then. Python 3.11 formats that
    traceback with the AST parser, which fails inside another `ast.parse` ("AST constructor
    recursion depth mismatch"). An awaiter that still awaits it gets the exception as before."""
    future.add_done_callback(lambda f: f.cancelled() or f.exception())
    return future


def backoff_delay(attempt: int, initial: float, cap: float) -> float:
    """Seconds before retry `attempt` (0-based): `initial` doubled per attempt up to `cap`,
    then jittered to between half and all of that, so that clients retrying together spread out."""
    ceiling = min(cap, initial * 2 ** attempt)
    return ceiling * random.uniform(0.5, 1.0)


def did_you_mean(key: str, known: Iterable[str], cutoff: float = 0.85) -> str:
    """" (did you mean 'x'?)" when a known key is close to `key` (a typo), else ""."""
    import difflib

    close = difflib.get_close_matches(key, list(known), n=1, cutoff=cutoff)
    return f" (did you mean '{close[0]}'?)" if close else ""
