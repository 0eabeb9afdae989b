"""The verdict channel's writing end, shared by the grader's runner plugins (verdict_plugin.py for
pytest, unittest_plugin.py for unittest runners): one-time keys, HMAC-chained records.

Uploaded beside the plugin and loaded from its file by path (nothing of the workdir can stand
in for it). Written for every Python 3 a task image may hold: no annotations, no f-strings,
only the standard library.
"""

import hashlib
import os
import sys

_write, _sha256, _getpid = os.write, hashlib.sha256, os.getpid
_isinstance, _sorted, _getattr = isinstance, sorted, getattr
BATCH = 64  # records per write


_ESCAPES = dict((o, "\\u%04x" % o) for o in list(range(32)) + [34, 92, 127])


def _str(s):
    """A JSON string, by str methods alone (the json module's helpers are module globals anyone can replace)."""
    if _getattr(s, "isascii", None) is not None and s.isascii():
        return '"' + s.translate(_ESCAPES) + '"'
    out = []
    for ch in s:
        o = ord(ch)
        if o > 0xFFFF:
            o -= 0x10000
            out.append("\\u%04x\\u%04x" % (0xD800 + (o >> 10), 0xDC00 + (o & 0x3FF)))
        else:
            out.append("\\u%04x" % o if o < 32 or ch in '"\\' or o > 126 else ch)
    return '"' + "".join(out) + '"'


def dumps(v):
    if v is True or v is False or v is None:
        return {True: "true", False: "false", None: "null"}[v]
    if _isinstance(v, int):
        return "%d" % v
    if _isinstance(v, (list, tuple)):
        return "[" + ",".join(dumps(x) for x in v) + "]"
    if _isinstance(v, dict):
        return "{" + ",".join(_str(k) + ":" + dumps(v[k]) for k in _sorted(v)) + "}"
    return _str("%s" % (v,))


def strip_env(here, option=None):
    """Leave nothing of the channel to the processes this one starts (runners started by tests)."""
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != here]
    if parts:
        os.environ["PYTHONPATH"] = os.pathsep.join(parts)
    else:
        os.environ.pop("PYTHONPATH", None)
    if option:
        addopts = os.environ.get("PYTEST_ADDOPTS", "").replace(option, "").strip()
        if addopts:
            os.environ["PYTEST_ADDOPTS"] = addopts
        else:
            os.environ.pop("PYTEST_ADDOPTS", None)
    sys.path[:] = [p for p in sys.path if not p or os.path.abspath(p) != here]


def claim(here):
    """One of the keys in `here`, taken by renaming it (atomic: each process the test command starts
    gets its own), read and deleted: (its number, the key)."""
    for name in sorted(n for n in os.listdir(here) if n.startswith("key.")):
        mine = os.path.join(here, "taken.%s.%d" % (name[4:], os.getpid()))
        try:
            os.rename(os.path.join(here, name), mine)
        except OSError:
            continue  # another process took it first
        with open(mine, "rb") as fh:
            key = fh.read().strip()
        os.unlink(mine)  # the code under test finds none left of the keys in use
        return name[4:], key
    raise LookupError("no key left")


class Channel(object):
    def __init__(self, here):
        number, key = claim(here)
        # HMAC-SHA256 by hand from hashlib's C objects, whose methods no code can replace
        key = bytearray(_sha256(key).digest() + b"\0" * 32)
        self._inner = _sha256(bytes(bytearray(b ^ 0x36 for b in key)))
        self._outer = _sha256(bytes(bytearray(b ^ 0x5C for b in key)))
        key[:] = b"\0" * len(key)
        self._prev = ""
        self._seq = 0
        self._lines = []
        self._pid = _getpid()  # a forked child shares the descriptor and the chain: it writes nothing
        path = os.path.join(here, "verdict.%s.jsonl" % number)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def write(self, rec):
        if _getpid() != self._pid:
            return
        rec["i"] = self._seq
        body = dumps(rec)
        inner = self._inner.copy()
        inner.update((self._prev + body).encode("utf-8"))
        outer = self._outer.copy()
        outer.update(inner.digest())
        self._prev = outer.hexdigest()
        self._seq += 1
        self._lines.append('{"m":"%s","r":%s}\n' % (self._prev, _str(body)))
        # lines go out in batches: a run that stops before its end record is no verdict however many
        # of its lines were written, but the start record (what the runner supports) goes out at once
        if len(self._lines) >= BATCH or self._seq == 1 or "end" in rec:
            self.flush()

    def flush(self):
        data, self._lines[:] = "".join(self._lines).encode("utf-8"), []
        while data:
            data = data[_write(self._fd, data):]


def open_channel(here, option=None):
    """The process's channel (None without a key) and its emit function, which never raises (a closed
    or replaced descriptor: the end record is missing, the run is not verdicted)."""
    try:
        strip_env(here, option)
        channel = Channel(here)
    except Exception:  # no key left (more processes than keys) or no file: no verdict from here
        channel = None

    def emit(rec):
        if channel is not None:
            try:
                channel.write(rec)
            except Exception:
                pass

    return channel, emit

