"""The grader's pytest plugin: each test's outcome from the runner's raw call result, signed.

Uploaded by the grader (sandbatch.grading.verdict) under a random module name into a
random directory outside the workdir, and loaded by `-p <name>` through PYTEST_ADDOPTS
and PYTHONPATH set for the test command only. pytest imports `-p` plugins before any
plugin of an installed distribution and before conftest files or the code under test,
so at import this module still sees pytest's own machinery as pytest built it. It then

- takes one of the per-grade keys beside it (`key.<n>`, renamed away atomically, read and
  deleted: each pytest process the test command starts gets its own), strips its
  directory and option from sys.path and the environment (pytest processes the tests
  start load nothing of it) and opens `verdict.<n>.jsonl` there for appending (its
  descriptor held from now on);
- wraps the raw call (`_pytest.runner.CallInfo.from_call`, or `call_runtest_hook` of older
  pytest) and unittest's result adapter (`TestCaseFunction._addexcinfo`): whether the
  setup or body of each test raised, and what, is written as the call returns - before
  any report object exists;
- keeps the objects that build, map, wrap, dispatch and summarise outcomes, and at the end
  of the run (pytest_unconfigure) writes which of them are no longer the same objects,
  the plugin objects registered once collection began (by code the tests import:
  conftest files and modules named by pytest_plugins are modules, not counted), and the
  files this session collected (its tests are those the verdict answers for).

Every line is chained with HMAC-SHA256 under the key: a line the key did not sign, a line
removed, or a run that never reached its end record is not a verdict. The module runs in
the test process with the code under test: docs/benchmarks.md says what that leaves open.

Written for every Python 3 and pytest >= 3 a task image may hold: no annotations, no
f-strings, only the standard library. PYTEST_DONT_REWRITE: pytest leaves its asserts (it
has none) alone instead of rewriting the module on every run.
"""

import hashlib
import os
import sys

import pytest

_here = os.path.dirname(os.path.abspath(__file__))
_name = __name__
_write, _sha256 = os.write, hashlib.sha256
_isinstance, _getattr, _type, _sorted = isinstance, getattr, type, sorted
_hookimpl = pytest.hookimpl


def _str(s):
    """A JSON string, by str methods alone (the json module's helpers are module globals anyone can replace)."""
    out = []
    for ch in s:
        o = ord(ch)
        if o > 0xFFFF:
            o -= 0x10000
            out.append("\\u%04x\\u%04x" % (0xD800 + (o >> 10), 0xDC00 + (o & 0x3FF)))
        else:
            out.append("\\u%04x" % o if o < 32 or ch in '"\\' or o > 126 else ch)
    return '"' + "".join(out) + '"'


def _dumps(v):
    if v is True or v is False or v is None:
        return {True: "true", False: "false", None: "null"}[v]
    if _isinstance(v, int):
        return "%d" % v
    if _isinstance(v, (list, tuple)):
        return "[" + ",".join(_dumps(x) for x in v) + "]"
    if _isinstance(v, dict):
        return "{" + ",".join(_str(k) + ":" + _dumps(v[k]) for k in _sorted(v)) + "}"
    return _str("%s" % (v,))


def _strip_env():
    """Leave nothing of the channel to the processes this one starts (pytest runs inside tests)."""
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != _here]
    if parts:
        os.environ["PYTHONPATH"] = os.pathsep.join(parts)
    else:
        os.environ.pop("PYTHONPATH", None)
    addopts = os.environ.get("PYTEST_ADDOPTS", "").replace("-p " + _name, "").strip()
    if addopts:
        os.environ["PYTEST_ADDOPTS"] = addopts
    else:
        os.environ.pop("PYTEST_ADDOPTS", None)
    sys.path[:] = [p for p in sys.path if not p or os.path.abspath(p) != _here]


def _claim():
    """One of the keys beside this file, taken by renaming it (atomic: each pytest process the test
    command starts gets its own), read and deleted: (its number, the key)."""
    for name in sorted(n for n in os.listdir(_here) if n.startswith("key.")):
        mine = os.path.join(_here, "taken.%s.%d" % (name[4:], os.getpid()))
        try:
            os.rename(os.path.join(_here, name), mine)
        except OSError:
            continue  # another process took it first
        with open(mine, "rb") as fh:
            key = fh.read().strip()
        os.unlink(mine)  # the code under test finds none left of the keys in use
        return name[4:], key
    raise LookupError("no key left")


class _Channel(object):
    def __init__(self):
        number, key = _claim()
        # HMAC-SHA256 by hand from hashlib's C objects, whose methods no code can replace
        key = bytearray(_sha256(key).digest() + b"\0" * 32)
        self._inner = _sha256(bytes(bytearray(b ^ 0x36 for b in key)))
        self._outer = _sha256(bytes(bytearray(b ^ 0x5C for b in key)))
        key[:] = b"\0" * len(key)
        self._prev = ""
        self._seq = 0
        path = os.path.join(_here, "verdict.%s.jsonl" % number)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def write(self, rec):
        rec["i"] = self._seq
        body = _dumps(rec)
        inner = self._inner.copy()
        inner.update((self._prev + body).encode("utf-8"))
        outer = self._outer.copy()
        outer.update(inner.digest())
        self._prev = outer.hexdigest()
        self._seq += 1
        _write(self._fd, (_dumps({"r": body, "m": self._prev}) + "\n").encode("utf-8"))


_channel = None
try:
    _strip_env()
    _channel = _Channel()
except Exception:  # no key left (more pytest processes than keys) or no file: no verdict from here
    _channel = None


def _emit(rec):
    if _channel is not None:
        try:
            _channel.write(rec)
        except Exception:  # a closed or replaced descriptor: the end record is missing, the run is not verdicted
            pass


# --- the objects pytest builds outcomes with -------------------------------------------------

_WATCHED = (
    ("_pytest.runner", ("call_and_report", "runtestprotocol", "call_runtest_hook", "pytest_runtest_makereport",
                        "pytest_runtest_call", "pytest_runtest_protocol", "pytest_report_teststatus",
                        "check_interactive_exception", "CallInfo")),
    ("_pytest.runner.CallInfo", ("from_call", "__init__", "excinfo")),
    ("_pytest.reports", ("TestReport", "BaseReport", "pytest_report_to_serializable",
                         "pytest_report_from_serializable")),
    ("_pytest.reports.TestReport", ("from_item_and_call", "__init__", "_to_json", "_from_json", "outcome", "passed",
                                    "failed", "skipped", "when", "longrepr", "wasxfail")),
    ("_pytest.reports.BaseReport", ("passed", "failed", "skipped", "outcome", "longreprtext", "head_line")),
    ("_pytest.skipping", ("pytest_runtest_makereport", "pytest_report_teststatus", "pytest_runtest_call",
                          "pytest_runtest_setup")),
    ("_pytest.python", ("pytest_pyfunc_call", "Function", "pytest_pycollect_makeitem")),
    ("_pytest.python.Function", ("runtest", "_getobj", "setup")),
    ("_pytest.unittest", ("pytest_runtest_makereport", "TestCaseFunction")),
    ("_pytest.unittest.TestCaseFunction", ("runtest", "_addexcinfo", "addError", "addFailure", "addSuccess")),
    ("_pytest.outcomes", ("fail", "skip", "xfail", "exit", "OutcomeException", "Skipped", "Failed")),
    ("_pytest.main", ("pytest_runtestloop", "wrap_session", "_main", "Session")),
    ("_pytest.terminal", ("pytest_report_teststatus", "TerminalReporter", "build_summary_stats_line",
                          "_get_line_with_reprcrash_message", "_folded_skips")),
    ("_pytest.terminal.TerminalReporter", (
        "pytest_runtest_logreport", "pytest_runtest_logfinish", "summary_stats", "short_test_summary",
        "summary_failures", "summary_errors", "summary_passes", "build_summary_stats_line", "pytest_sessionfinish",
        "pytest_terminal_summary", "write_line", "write_sep", "getreports", "stats", "_add_stats")),
    ("_pytest.config.PytestPluginManager", ("register", "unregister", "_hookexec", "hook")),
    ("pluggy._hooks.HookCaller", ("__call__", "_hookexec", "call_historic", "call_extra")),
    ("pluggy._hooks._HookCaller", ("__call__", "_hookexec", "call_historic", "call_extra")),
    ("pluggy.hooks._HookCaller", ("__call__", "_hookexec", "call_historic", "call_extra")),
    ("pluggy._callers", ("_multicall",)),
    ("pluggy.callers", ("_multicall", "_Result")),
    ("pluggy._result", ("Result", "_Result")),
    ("pluggy._result.Result", ("get_result", "force_result", "force_exception", "from_call")),
    ("pluggy._manager.PluginManager", ("_hookexec", "register", "unregister")),
    ("pluggy.manager.PluginManager", ("_hookexec", "register", "unregister")),
)


def _owner(path):
    """A loaded module or a class inside one (nothing is imported here)."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        mod = sys.modules.get(".".join(parts[:i]))
        if mod is not None:
            obj = mod
            for attr in parts[i:]:
                obj = _getattr(obj, attr, None)
                if obj is None:
                    return None
            return obj
    return None


def _raw(owner, attr):
    """The attribute as stored (a class's own __dict__ entry, not a bound method), and its code."""
    d = _getattr(owner, "__dict__", None)
    obj = d.get(attr) if _isinstance(owner, type) and d is not None else _getattr(owner, attr, None)
    if obj is None and _isinstance(owner, type):
        obj = _getattr(owner, attr, None)
    if _getattr(obj, "__self__", None) is not None:
        obj = _getattr(obj, "__func__", obj)  # a bound method is made anew on each access
    fn = _getattr(obj, "__func__", obj)
    fn = _getattr(fn, "fget", fn)
    return obj, _getattr(fn, "__code__", None)


def _snapshot():
    out = {}
    for path, attrs in _WATCHED:
        owner = _owner(path)
        if owner is None:
            continue
        for attr in attrs:  # also those absent: one added later (a class property over an attribute) counts
            obj, code = _raw(owner, attr)
            out[path + "." + attr] = (owner, attr, obj, code)
    return out



# --- recording the raw call ------------------------------------------------------------------

_stack = []  # the items being run (pytester runs sessions inside a test)


def _exc_name(excinfo):
    t = _getattr(excinfo, "type", None)
    if t is None:
        return None
    return "%s.%s" % (_getattr(t, "__module__", "?"), _getattr(t, "__name__", "?"))


def _skip_kind(excinfo):
    outcomes = sys.modules.get("_pytest.outcomes")
    value = _getattr(excinfo, "value", None)
    skipped = _getattr(outcomes, "Skipped", None)
    xfailed = _getattr(outcomes, "XFailed", None) or _getattr(sys.modules.get("_pytest.skipping"), "XFailed", None)
    if xfailed is not None and _isinstance(value, xfailed):
        return "xfailed"
    if skipped is not None and _isinstance(value, skipped):
        return "skipped"
    return "raised"


def _record(item, when, excinfo):
    if item is None:
        return
    rec = {"t": _getattr(item, "nodeid", "?"), "w": when}
    marker = _getattr(item, "get_closest_marker", None) or _getattr(item, "get_marker", None)
    try:
        if marker is not None and marker("xfail") is not None:
            rec["xf"] = True  # an expected failure: the raise is reported as XFAIL
    except Exception:
        pass
    if excinfo is None:
        rec["k"] = "ok"
    else:
        rec["k"], rec["x"] = _skip_kind(excinfo), _exc_name(excinfo)
    _emit(rec)


def _install():
    runner = sys.modules.get("_pytest.runner")
    if runner is None:
        return False
    orig_car = runner.call_and_report

    def call_and_report(item, when, *args, **kwds):
        _stack.append((item, when))
        try:
            return orig_car(item, when, *args, **kwds)
        finally:
            _stack.pop()

    runner.call_and_report = call_and_report
    info = _getattr(runner, "CallInfo", None)
    orig_from_call = info.__dict__.get("from_call") if info is not None else None
    if orig_from_call is not None:
        bound = orig_from_call.__get__(None, info)

        def from_call(cls, func, when, *args, **kwds):
            call = bound(func, when, *args, **kwds) if cls is info else orig_from_call.__get__(None, cls)(
                func, when, *args, **kwds)
            if _stack and when in ("setup", "call") and _stack[-1][1] == when:
                _record(_stack[-1][0], when, call.excinfo)
            return call

        info.from_call = classmethod(from_call)
    elif _getattr(runner, "call_runtest_hook", None) is not None:  # pytest < 4.4
        orig_crh = runner.call_runtest_hook

        def call_runtest_hook(item, when, **kwds):
            call = orig_crh(item, when, **kwds)
            if when in ("setup", "call"):
                _record(item, when, call.excinfo)
            return call

        runner.call_runtest_hook = call_runtest_hook
    else:
        return False
    tcf = _getattr(sys.modules.get("_pytest.unittest"), "TestCaseFunction", None)
    orig_add = tcf.__dict__.get("_addexcinfo") if tcf is not None else None
    if orig_add is not None:
        def _addexcinfo(self, rawexcinfo):
            orig_add(self, rawexcinfo)
            excinfo = (_getattr(self, "_excinfo", None) or [None])[-1]
            _record(self, "call", excinfo)

        tcf._addexcinfo = _addexcinfo
    return True


try:
    _installed = _install()
except Exception:
    _installed = False
_start = _snapshot()
_emit({"start": True, "pytest": _getattr(sys.modules.get("pytest"), "__version__", "?"),
       "python": sys.version.split()[0], "supported": bool(_installed)})

# --- the run's own objects -------------------------------------------------------------------

_config = []
_collecting = []
_late = []  # plugin objects registered once collection began: by code the tests import


@_hookimpl(tryfirst=True)
def pytest_configure(config):
    _config.append(config)


@_hookimpl(trylast=True)
def pytest_sessionstart(session):
    if not _config or session.config is not _config[0]:
        return
    pm = session.config.pluginmanager
    for owner, attr in ((session.config, "hook"), (pm, "hook"), (pm, "_inner_hookexec"), (pm, "_hookexec")):
        obj, code = _raw(owner, attr)
        if obj is not None:
            _start["%s.%s" % (_type(owner).__name__, attr)] = (owner, attr, obj, code)
    reporter = pm.get_plugin("terminalreporter")
    if reporter is not None:
        _start["terminalreporter"] = (pm, "terminalreporter", reporter, None)
        _start["TerminalReporter.stats"] = (reporter, "stats", reporter.stats, None)


@_hookimpl(tryfirst=True)
def pytest_collection(session):
    _collecting.append(True)


_files = []  # the nodeids of the files and directories this session collected (or failed to)


def pytest_collectreport(report):
    nodeid = _getattr(report, "nodeid", "")
    if nodeid and "::" not in nodeid:
        _files.append(nodeid)


def pytest_plugin_registered(plugin, manager):
    # modules: conftest files (the task's) and plugins named by pytest_plugins
    if _collecting and _type(plugin).__name__ != "module":
        _late.append(manager.get_name(plugin) or _type(plugin).__name__)


@_hookimpl(trylast=True)
def pytest_unconfigure(config):
    if not _config or config is not _config[0]:
        return
    pm = config.pluginmanager
    changed = []
    for name, (owner, attr, obj, code) in _sorted(_start.items()):
        now, now_code = (pm.get_plugin(attr), None) if name == "terminalreporter" else _raw(owner, attr)
        if now is not obj or now_code is not code:
            changed.append(name)
    root = _getattr(config, "rootpath", None) or _getattr(config, "rootdir", None) or ""
    _emit({"end": True, "changed": changed, "added": _late, "rootdir": "%s" % (root,), "files": _files})
