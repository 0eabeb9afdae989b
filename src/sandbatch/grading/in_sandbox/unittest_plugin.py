"""The grader's unittest plugin: each test's outcome from unittest's own TestCase.run, signed.

Uploaded by the grader (sandbatch.grading.unittest_verdict) as `sitecustomize.py` into a
random directory outside the workdir, beside the channel's modules (_sbv_channel.py,
_sbv_checks.py, _sbv_tracker.py); that directory goes first on PYTHONPATH for the test command only. The interpreter imports sitecustomize while it starts, before the script
(Django's tests/runtests.py, `python -m unittest`) or any code of the workdir runs, so this
module sees unittest as the standard library built it. It then

- takes the verdict descriptor (channel_writer.open_channel), strips its directory from sys.path and
  PYTHONPATH (processes the tests start load nothing of it), and imports the image's own
  sitecustomize, if any, as the interpreter would have (startup_tracker.chain_site): one outside
  the workdir (the workdir's, in any form, is a start-up hook of the code under test: recorded,
  not imported); then records
  every module of the workdir imported so far (run_checks.startup);
- wraps TestCase.run: for a run under a unittest TestResult it records, as each returns,
  whether setUp and the test method raised (and what), and every failure inside a subTest,
  before any result object hears of it; the test is named as unittest's runner prints it
  (str(test), and the first line of its docstring on the next line);
- checks each test before it runs and probes the operands of its assertEqual family
  (run_checks: tests_replaced, vacuous_assertion);
- at exit writes which of unittest's result, runner and assertion machinery are no longer
  the objects they were.

A process that exits without running its atexit handlers (os._exit, a signal) leaves its
verdict without its end record: not a verdict. Written for every Python 3 a task image may
hold: no annotations, no f-strings, only the standard library.
"""

import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_getattr, _isinstance, _str = getattr, isinstance, str


def _sibling(name):
    import importlib.util as iu
    spec = iu.spec_from_file_location("_sbv_%s_%d" % (name, id(_here)), os.path.join(_here, "_sbv_%s.py" % name))
    mod = iu.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_checks_mod = _sibling("checks")
_channel, _emit = _sibling("channel").open_channel(_here)
_checks = _checks_mod.Checks(_checks_mod.read_conf(_here), _emit)

# unittest's outcome machinery: replacing any of it is runner_patched
_RUNNER = (
    ("unittest", ("TestCase", "TestResult", "TextTestResult", "TextTestRunner", "TestSuite", "TestLoader", "main")),
    ("unittest.result.TestResult", ("addSuccess", "addFailure", "addError", "addSkip", "addExpectedFailure",
                                    "addUnexpectedSuccess", "addSubTest", "startTest", "stopTest", "wasSuccessful",
                                    "failures", "errors")),
    ("unittest.runner.TextTestResult", ("addSuccess", "addFailure", "addError", "addSkip", "addExpectedFailure",
                                        "addUnexpectedSuccess", "addSubTest", "getDescription", "printErrors",
                                        "printErrorList", "startTest", "stopTest")),
    ("unittest.runner.TextTestRunner", ("run", "_makeResult")),
    ("unittest.suite.TestSuite", ("run", "__call__", "_handleClassSetUp", "_handleModuleFixture")),
    ("unittest.suite.BaseTestSuite", ("run", "__call__", "__iter__")),
)
_running = []  # the tests being run (a test may run a suite inside it)


def _name(test):
    """The test as unittest's runner prints it (TextTestResult.getDescription, with descriptions)."""
    name = _str(test)
    try:
        doc = test.shortDescription()
    except Exception:
        doc = None
    return name + "\n" + doc if doc else name


def _kind(exc):
    import unittest
    return "skipped" if _isinstance(exc, unittest.SkipTest) else "raised"


def _recorder(test, when, fn, expecting):
    def call(*args, **kwargs):
        try:
            out = fn(*args, **kwargs)
        except BaseException as exc:
            rec = {"t": test, "w": when, "k": _kind(exc), "x": "%s.%s" % (type(exc).__module__, type(exc).__name__)}
            if expecting:
                rec["xf"] = True
            _emit(rec)
            raise
        rec = {"t": test, "w": when, "k": "ok"}
        if expecting:
            rec["xf"] = True
        _emit(rec)
        return out

    call.__dict__.update(_getattr(fn, "__dict__", {}))  # __unittest_expecting_failure__, __unittest_skip__
    call.__name__ = _getattr(fn, "__name__", when)
    return call


def _install():
    import contextlib
    import unittest
    import unittest.result
    tc = unittest.TestCase
    orig_run = tc.__dict__["run"]
    orig_subtest = tc.__dict__.get("subTest")

    def run(self, result=None):
        if result is not None and not _isinstance(result, unittest.result.TestResult):
            return orig_run(self, result)  # another runner's adapter (pytest's) records its own
        method_name = _getattr(self, "_testMethodName", None)
        method = _getattr(self, method_name, None) if method_name else None
        test = _name(self)
        expecting = bool(_getattr(method, "__unittest_expecting_failure__", False) or
                         _getattr(self, "_expecting_failure", False))
        _running.append(test)
        added = []
        try:
            try:
                _checks.verify(test, sys.modules.get(type(self).__module__), type(self), method_name, method)
                _checks.hooks(test)
            except Exception:
                pass
            if callable(method):
                self.__dict__[method_name] = _recorder(test, "call", method, expecting)
                added.append(method_name)
            set_up = _getattr(self, "setUp", None)
            if callable(set_up) and "setUp" not in self.__dict__:
                self.__dict__["setUp"] = _recorder(test, "setup", set_up, False)
                added.append("setUp")
            return orig_run(self, result)
        finally:
            for attr in added:
                self.__dict__.pop(attr, None)
            shadowed = [a for a in self.__dict__ if a.startswith(("assert", "fail")) and callable(self.__dict__[a])]
            if shadowed:
                _emit({"t": test, "w": "asrt", "x": "the test's own %s was replaced on it" % ", ".join(shadowed)})
            try:
                _checks.hooks(test)
            except Exception:
                pass
            _running.pop()

    tc.run = run
    if orig_subtest is not None:
        @contextlib.contextmanager
        def subTest(self, *args, **kwargs):
            with orig_subtest(self, *args, **kwargs):
                try:
                    yield
                except BaseException as exc:
                    if _running:
                        _emit({"t": _running[-1], "w": "call", "k": _kind(exc),
                               "x": "%s.%s" % (type(exc).__module__, type(exc).__name__)})
                    raise

        subTest.__doc__ = orig_subtest.__doc__
        tc.subTest = subTest
    _checks.current = lambda: _running[-1] if _running else None
    _checks.install_unittest()


def _end():
    _emit({"end": True, "changed": _checks_mod.changed(_start), "added": [],
           "asserts": _checks_mod.changed(_assertions)})


if _channel is not None:
    try:
        _install()
        _supported = True
    except Exception:
        _supported = False
    _start = _checks_mod.snapshot(_RUNNER)
    _assertions = _checks_mod.snapshot(_checks_mod.ASSERTIONS)
    _emit({"start": True, "runner": "unittest", "python": sys.version.split()[0], "supported": _supported})
    import atexit
    atexit.register(_end)
_checks.skipped_site(_sibling("tracker").chain_site(_here, _checks._rel))
try:
    _checks.startup()
except Exception:
    pass
