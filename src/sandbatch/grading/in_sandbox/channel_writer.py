"""The verdict channel's writing end, shared by the grader's runner plugins (pytest_plugin.py for
pytest, unittest_plugin.py for unittest runners): records written into a descriptor the test
command inherits (or the pipe opened by name, where a runner such as tox closes inherited
descriptors), whose reading end is drained by a process of another user.

The eval script (verdict.Channel.prologue) opens a pipe whose reading end `cat`, running as
root, appends to a file in the channel's directory, and runs the test command as an
unprivileged user with the writing end as descriptor SBV_VERDICT_FD: the code under test can
add lines to the verdict (a test's outcome is its worst over every line) but can neither
read, replace nor remove any, and holds no key. Each line carries its process id and its
number in that process's sequence: a line added under a process's id and number breaks the
sequence (the verdict is then no verdict), and a process that never wrote its end record
leaves the verdict incomplete.

Uploaded beside the plugin and loaded from its file by path (nothing of the workdir can stand
in for it). Written for every Python 3 a task image may hold: no annotations, no f-strings,
only the standard library.
"""

import os
import sys

_write, _getpid = os.write, os.getpid
_isinstance, _sorted, _getattr = isinstance, sorted, getattr
BATCH = 64  # records per write
PIPE_BUF = 4096  # a write of at most this many bytes into a pipe is never interleaved with another's
FD_VAR = "SBV_VERDICT_FD"


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
    os.environ.pop(FD_VAR, None)
    sys.path[:] = [p for p in sys.path if not p or os.path.abspath(p) != here]


class Channel(object):
    def __init__(self, fd):
        os.fstat(fd)  # the descriptor is open
        try:
            os.set_inheritable(fd, False)  # processes the tests start get none of it
        except Exception:
            pass
        self._fd = fd
        self._seq = 0
        self._lines = []
        self._size = 0
        self._pid = _getpid()  # a forked child shares the descriptor: it writes nothing

    def write(self, rec):
        if _getpid() != self._pid:
            return
        rec["p"], rec["i"] = self._pid, self._seq
        self._seq += 1
        line = (dumps(rec) + "\n").encode("utf-8")
        if self._lines and self._size + len(line) > PIPE_BUF:
            self.flush()
        self._lines.append(line)
        self._size += len(line)
        # lines go out in batches: a run that stops before its end record is no verdict however many
        # of its lines were written, but the start record (what the runner supports) goes out at once
        if len(self._lines) >= BATCH or "start" in rec or "end" in rec:
            self.flush()

    def flush(self):
        data, self._lines[:], self._size = b"".join(self._lines), [], 0
        while data:
            data = data[_write(self._fd, data):]


def open_channel(here, option=None):
    """The process's channel (None without the descriptor) and its emit function, which never raises (a
    closed or replaced descriptor: the end record is missing, the run is not verdicted)."""
    try:
        fd = int(os.environ.get(FD_VAR, ""))
        os.fstat(fd)
    except (ValueError, OSError):
        fd = None
    if fd is None:  # a runner that starts pytest with the environment but none of the inherited
        try:        # descriptors (tox): the pipe itself, which the test user may open for writing alone
            fd = os.open(os.path.join(here, "pipe"), os.O_WRONLY | os.O_NONBLOCK)  # no reader: no verdict
            os.set_blocking(fd, True)
        except (OSError, AttributeError):
            fd = None
    strip_env(here, option)
    try:
        channel = Channel(fd) if fd is not None else None
    except Exception:
        channel = None

    def emit(rec):
        if channel is not None:
            try:
                channel.write(rec)
            except Exception:
                pass

    return channel, emit
