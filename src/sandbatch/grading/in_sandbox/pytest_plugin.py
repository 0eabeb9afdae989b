"""The grader's pytest plugin: each test's outcome from the runner's raw call result, signed.

Uploaded by the grader (sandbatch.grading.verdict) under a random module name into a
random directory outside the workdir, and loaded by `-p <name>` through PYTEST_ADDOPTS
and PYTHONPATH set for the test command only. pytest imports `-p` plugins before any
plugin of an installed distribution and before conftest files or the code under test, but
after the `-p` plugins the ini file's `addopts` names: the channel directory's
sitecustomize (startup_tracker.py), there since the interpreter started, took pytest's
machinery as pytest built it before the first of those ran, and noted what each imported.
At import this module
- stops that tracker, and at the end of the run counts what of the runner and the assertion
  machinery changed between its pristine state and this module's load;
- records the workdir modules imported so far that are not the runner's own, each with what
  started its import (run_checks.Checks.startup, written once pytest is configured: the ini
  file and its `-p` plugins are known then); plugin_findings.of_the_patch judges them;
- takes the verdict descriptor the test command inherited (channel_writer.open_channel: a
  pipe root drains into a file the test user cannot open), strips its directory, option and
  descriptor from sys.path and the environment (pytest processes the tests start load
  nothing of it);
- wraps the raw call (`_pytest.runner.CallInfo.from_call`, or `call_runtest_hook` of older
  pytest) and unittest's result adapter (`TestCaseFunction._addexcinfo`): whether the
  setup or body of each test raised, and what, is written as the call returns - before
  any report object exists;
- keeps the objects that build, map, wrap, dispatch and summarise outcomes, and at the end
  of the run (pytest_unconfigure) writes which of them are no longer the same objects,
  the plugin objects registered once collection began (by code the tests import:
  conftest files and modules named by pytest_plugins are modules, not counted), the
  files this session collected (its tests are those the verdict answers for) and the
  session's exit status (pytest's own, whatever script runs it).

The channel's writing end (channel_writer.py), the checks of the tests themselves
(run_checks.py: tests replaced, vacuous assertions, the assertion machinery) and the start-up
tracker are uploaded beside it as _sbv_channel.py, _sbv_checks.py and _sbv_tracker.py and loaded
from those files; each test's call is checked before it runs, and every comparison a rewritten
assert finds true reaches the probe.

Each line carries this process's id and its number in its sequence: a line removed, a line
added under this process's number, or a run that never reached its end record is not a
verdict. The module runs in the test process with the code under test: docs/benchmarks.md
says what that leaves open.

Written for every Python 3 and pytest >= 3 a task image may hold: no annotations, no
f-strings, only the standard library. PYTEST_DONT_REWRITE: pytest leaves its asserts (it
has none) alone instead of rewriting the module on every run.
"""

import os
import sys

import pytest

_here = os.path.dirname(os.path.abspath(__file__))
_name = __name__
_isinstance, _getattr, _type, _sorted = isinstance, getattr, type, sorted
_hookimpl = pytest.hookimpl


def _sibling(name):
    """A module of the channel uploaded beside this one (`_sbv_<name>.py`), loaded from its file: nothing
    of the workdir, which comes first on sys.path, can stand in for it."""
    import importlib.util as iu
    spec = iu.spec_from_file_location("%s_%s" % (_name, name), os.path.join(_here, "_sbv_%s.py" % name))
    mod = iu.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_checks_mod = _sibling("checks")
# the channel's start-up module (startup_tracker.py, this directory's sitecustomize): what it saw since the
# interpreter started, stopped now; none where the interpreter ran no sitecustomize (-S)
_tracker = _getattr(sys.modules.pop(_sibling("tracker").KEY + _here, None), "TRACKER", None)
if _tracker is not None:
    _tracker.stop()
_channel, _emit = _sibling("channel").open_channel(_here, "-p %s" % _name)
_checks = _checks_mod.Checks(_checks_mod.read_conf(_here), _emit)  # notes the workdir code imported so far
# what of the runner and the assertion machinery changed between the first plugin a `-p` option named
# (the ini file's come before this one) and now: its code and what it imported ran in between
_pristine = _tracker.pristine if _tracker is not None else None
_before_me = (_checks_mod.changed(_pristine[0]), _checks_mod.changed(_pristine[1])) if _pristine else ([], [])


_raw = _checks_mod.raw


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


def _judge(item, after=False):
    """Before a test's call: it is the code its file compiles to; before and after: no trace function
    of the code under test is set (run_checks)."""
    test = _getattr(item, "nodeid", "?")
    try:
        if not after:
            name = _getattr(item, "originalname", None) or _getattr(item, "name", "").split("[")[0]
            _checks.verify(test, _getattr(item, "module", None), _getattr(item, "cls", None), name,
                           _getattr(item, "obj", None))
        _checks.hooks(test)
    except Exception:
        pass


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
            item = _stack[-1][0] if _stack and when == "call" and _stack[-1][1] == when else None
            if item is not None:
                _judge(item)
            call = bound(func, when, *args, **kwds) if cls is info else orig_from_call.__get__(None, cls)(
                func, when, *args, **kwds)
            if _stack and when in ("setup", "call") and _stack[-1][1] == when:
                _record(_stack[-1][0], when, call.excinfo)
            if item is not None:
                _judge(item, after=True)
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
_checks.current = lambda: _getattr(_stack[-1][0], "nodeid", None) if _stack else None
try:
    _checks.install_pytest()
    _checks.install_unittest()
except Exception:
    pass
_start = _checks_mod.snapshot(_checks_mod.PYTEST_RUNNER)
_assertions = _checks_mod.snapshot(_checks_mod.ASSERTIONS)
_emit({"start": True, "pytest": _getattr(sys.modules.get("pytest"), "__version__", "?"),
       "python": sys.version.split()[0], "supported": bool(_installed)})

# --- the run's own objects -------------------------------------------------------------------

_config = []
_session = []  # the outermost session: its exit status is the one pytest returns
_collecting = []
_late = []  # plugin objects registered once collection began: by code the tests import


@_hookimpl(tryfirst=True)
def pytest_configure(config):
    _config.append(config)
    if len(_config) == 1:
        _checks.rewrite_config = config  # test modules are rewritten with the session's options
        try:
            how = _started(config)
        except Exception:
            how = None  # what started them unknown: every one is a hook
        try:  # code of the workdir imported before pytest loaded this plugin, and what started it
            _checks.skipped_site(_tracker.next_site if _tracker is not None else None)
            _checks.startup(how, scan=False)
        except Exception:
            pass


def _started(config):
    """For a module imported before this plugin: the plugin pytest was importing for a `-p` option when it
    was first asked for (by), the workdir's ini file that names that plugin among its addopts (ini), the
    plugin module's own file where it is the workdir's (pf); None where the runner did not import it."""
    via = _tracker.via if _tracker is not None else {}
    # pytest >= 6.1's path, or older pytest's (newer pytest warns on inifile)
    ini = _getattr(config, "inipath", None) if hasattr(_type(config), "inipath") else _getattr(config, "inifile", None)
    ini = _checks._rel("%s" % (ini,)) if ini else None
    named, args = set(), list(config.getini("addopts") or ()) if ini else []
    for i, arg in enumerate(args):
        name = args[i + 1] if arg == "-p" and i + 1 < len(args) else (arg[2:] if arg[:2] == "-p" else "")
        if name and not name.startswith("no:"):
            named.add(name)

    plugins = set(via.values())

    def how(name):
        # a plugin module itself may have been claimed by pytest's assertion rewriter before the tracker was asked
        plugin = via.get(name) or (name if name in plugins else None)
        if plugin is None:
            return None
        out = {"by": plugin}
        if plugin in named:
            out["ini"] = ini
        pf = _checks._rel(_checks_mod._module_file(sys.modules.get(plugin)) or "")
        if pf is not None:
            out["pf"] = pf
        return out

    return how


@_hookimpl(trylast=True)
def pytest_sessionstart(session):
    if not _config or session.config is not _config[0]:
        return
    _session.append(session)
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
    # pytest's own exit status (the session's, which pytest returns once this hook is done), not the
    # status of whatever script runs pytest (`pytest ... || true`)
    status = _getattr(_session[0], "exitstatus", None) if _session else None
    _emit({"end": True, "changed": changed + _before_me[0], "added": _late, "rootdir": "%s" % (root,),
           "asserts": _checks_mod.changed(_assertions) + _before_me[1], "files": _files,
           "exit": int.__int__(status) if _isinstance(status, int) else None})
