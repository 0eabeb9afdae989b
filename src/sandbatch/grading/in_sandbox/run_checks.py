"""Checks of the test run that no log shows, shared by the grader's runner plugins
(pytest_plugin.py for pytest, unittest_plugin.py for unittest runners); docs/benchmarks.md,
"The tests that run are the tests the grader placed" and "Vacuous assertions".

Uploaded beside the plugin and loaded from its file by path before any code of the workdir
runs. It writes records into the verdict channel:

- `repl` (tests_replaced): the test about to run is not the code compiled from its file as
  restored: its function (or, for a decorated one, any function of its file reachable from
  it) differs from what this module compiles from the file's source itself (with pytest's
  own rewriter, as pytest compiles test modules); the file changed on disk since the grader
  placed it (its sha256 against the manifest written before the test command); the test
  module came from a loader defined in the code under test; or a trace or profile function
  (sys.settrace, sys.setprofile, threading, sys.monitoring) of the code under test is set
  while tests run;
- `vac` (vacuous_assertion): a comparison a test asserted held, with an operand of a type the
  code under test defines that also compares true with fresh sentinel objects (an object
  equal to anything), through pytest's rewritten asserts and unittest's assertEqual family;
- at the end, which of the assertion machinery (unittest's assert methods and contexts,
  pytest.raises, approx, warns, the assertion rewriter and its helpers) is no longer the same
  object (assertions_patched).

Written for every Python 3 a task image may hold: no annotations, no f-strings, only the
standard library.
"""

import ast
import hashlib
import json
import os
import sys
import warnings

_isinstance, _getattr, _type, _id = isinstance, getattr, type, id
_real, _resolved = os.path.realpath, {}


def _realpath(path):
    """os.path.realpath, once per path (it stats every component; a run asks for the same few)."""
    try:
        return _resolved[path]
    except KeyError:
        out = _resolved[path] = _real(path)
        return out
_OPTIMIZED = 0x1  # CO_OPTIMIZED: a function's code (a class body's is not)
# value types a probe makes fresh instances of when the operand's type derives from one
_VALUE_TYPES = {"builtins.int", "builtins.float", "builtins.complex", "builtins.str", "decimal.Decimal",
                "_decimal.Decimal", "_pydecimal.Decimal", "fractions.Fraction"}

# the assertion machinery: (owner, attributes); rebinding any of them is kind assertions_patched
ASSERTIONS = (
    ("unittest.case.TestCase", (
        "assertEqual", "assertEquals", "failUnlessEqual", "assertNotEqual", "assertTrue", "assertFalse", "assertIs",
        "assertIsNot", "assertIsNone", "assertIsNotNone", "assertIn", "assertNotIn", "assertIsInstance",
        "assertNotIsInstance", "assertRaises", "assertRaisesRegex", "assertRaisesRegexp", "assertWarns",
        "assertWarnsRegex", "assertLogs", "assertNoLogs", "assertAlmostEqual", "assertNotAlmostEqual",
        "assertGreater", "assertGreaterEqual", "assertLess", "assertLessEqual", "assertRegex", "assertNotRegex",
        "assertCountEqual", "assertListEqual", "assertTupleEqual", "assertSetEqual", "assertDictEqual",
        "assertSequenceEqual", "assertMultiLineEqual", "assertDictContainsSubset", "fail", "failureException",
        "_baseAssertEqual", "_getAssertEqualityFunc", "_formatMessage", "subTest", "run", "__call__", "debug",
        "skipTest", "_callTestMethod", "_callSetUp", "_callTearDown", "doCleanups")),
    ("unittest.case._AssertRaisesBaseContext", ("__init__", "handle")),
    ("unittest.case._AssertRaisesContext", ("__enter__", "__exit__")),
    ("unittest.case._AssertWarnsContext", ("__enter__", "__exit__")),
    ("unittest.case._AssertLogsContext", ("__enter__", "__exit__")),
    ("unittest._log._AssertLogsContext", ("__enter__", "__exit__")),
    ("unittest.case._Outcome", ("__init__", "testPartExecutor")),
    ("unittest.case", ("_Outcome", "SkipTest", "_AssertRaisesContext", "_AssertWarnsContext", "expectedFailure",
                       "skip", "skipIf", "skipUnless", "TestCase")),
    ("_pytest.python_api", ("raises", "approx", "RaisesContext", "ApproxScalar", "ApproxBase")),
    ("_pytest.python_api.RaisesContext", ("__enter__", "__exit__")),
    ("_pytest.python_api.ApproxScalar", ("__eq__", "tolerance")),
    ("_pytest.python_api.ApproxBase", ("__eq__", "__ne__")),
    ("_pytest.raises", ("raises", "RaisesExc", "RaisesGroup")),
    ("_pytest.raises.RaisesExc", ("__enter__", "__exit__", "matches")),
    ("_pytest.approx", ("approx", "ApproxScalar", "ApproxBase")),
    ("_pytest.approx.ApproxScalar", ("__eq__", "tolerance")),
    ("_pytest.approx.ApproxBase", ("__eq__", "__ne__")),
    ("_pytest.recwarn", ("warns", "deprecated_call", "WarningsChecker")),
    ("_pytest.recwarn.WarningsChecker", ("__enter__", "__exit__")),
    ("_pytest.assertion.rewrite", (
        "rewrite_asserts", "AssertionRewriter", "AssertionRewritingHook", "_call_reprcompare", "_format_explanation",
        "_saferepr", "_format_assertmsg", "_should_repr_global_name", "_format_boolop", "_call_assertion_pass",
        "_check_if_assertion_pass_impl", "_rewrite_test", "_read_pyc", "_write_pyc", "_sbv_probe_compare", "PYC_TAIL")),
    ("_pytest.assertion.rewrite.AssertionRewritingHook", ("exec_module", "find_spec", "_should_rewrite")),
    ("_pytest.assertion.rewrite.AssertionRewriter", ("run", "visit_Assert", "visit_Compare")),
    ("pytest", ("raises", "approx", "warns", "fail", "skip", "xfail", "deprecated_call")),
)
# pytest's outcome machinery: the objects that build, map, wrap, dispatch and summarise outcomes
PYTEST_RUNNER = (
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
# unittest's comparing asserts: the operator each asserts held
_UNITTEST_OPS = (
    ("assertEqual", "=="), ("assertNotEqual", "!="), ("assertListEqual", "=="), ("assertTupleEqual", "=="),
    ("assertDictEqual", "=="), ("assertSetEqual", "=="), ("assertSequenceEqual", "=="),
    ("assertMultiLineEqual", "=="), ("assertCountEqual", "=="), ("assertAlmostEqual", "=="), ("assertIn", "in"),
    ("assertNotIn", "not in"), ("assertGreater", ">"), ("assertGreaterEqual", ">="), ("assertLess", "<"),
    ("assertLessEqual", "<="),
)
_OPS = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "in": lambda a, b: a in b, "not in": lambda a, b: a not in b,
}


def owner(path):
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


def raw(owner_obj, attr):
    """The attribute as stored (a class's own __dict__ entry, not a bound method), and its code."""
    d = _getattr(owner_obj, "__dict__", None)
    obj = d.get(attr) if _isinstance(owner_obj, type) and d is not None else _getattr(owner_obj, attr, None)
    if obj is None and _isinstance(owner_obj, type):
        obj = _getattr(owner_obj, attr, None)
    if _getattr(obj, "__self__", None) is not None:
        obj = _getattr(obj, "__func__", obj)  # a bound method is made anew on each access
    fn = _getattr(obj, "__func__", obj)
    fn = _getattr(fn, "fget", fn)
    return obj, _getattr(fn, "__code__", None)


def snapshot(watched):
    out = {}
    for path, attrs in watched:
        own = owner(path)
        if own is None:
            continue
        for attr in attrs:  # also those absent: one added later (a class property over an attribute) counts
            obj, code = raw(own, attr)
            out[path + "." + attr] = (own, attr, obj, code)
    return out


def changed(start):
    out = []
    for name in sorted(start):
        own, attr, obj, code = start[name]
        now, now_code = raw(own, attr)
        if now is not obj or now_code is not code:
            out.append(name)
    return out


def read_conf(here):
    """What the grader placed beside the plugin: the workdir, the test-file rules, the manifest."""
    try:
        with open(os.path.join(here, "conf.json")) as fh:
            conf = json.load(fh)
    except (OSError, IOError, ValueError):
        return {}
    try:
        with open(os.path.join(here, "manifest")) as fh:  # `sha256sum` lines, written before the test command
            conf["manifest"] = dict((ln[66:].strip(), ln[:64]) for ln in fh if len(ln) > 66)
    except (OSError, IOError):
        conf["manifest"] = {}
    return conf


class _Sentinel(object):
    """A fresh object no honest value equals."""


class Checks(object):
    def __init__(self, conf, emit):
        self.emit = emit
        wd = conf.get("workdir") or ""
        self.wd = _realpath(wd).rstrip(os.sep) + os.sep if wd else None
        self.manifest = dict((_realpath(os.path.join(wd, k)), v) for k, v in (conf.get("manifest") or {}).items())
        self.dirs = set(conf.get("test_dirs") or ())
        self.shallow = set(conf.get("shallow_test_dirs") or ())
        self.current = lambda: None  # the id of the test running, set by the plugin
        self.rewrite = None  # pytest's rewrite_asserts, as the plugin found it at load
        self.rewrite_config = None
        self._files = {}  # test file -> (codes by qualname, decorated qualnames, every code) or a problem
        self._good = {}  # (file, qualname) -> (object, code) found genuine
        self._made = {}  # type -> defined by the code under test
        self._said = set()
        self._rewritten = {}  # test file -> the code pytest's rewriter compiled from it as the module was imported
        self._hooked = []  # non-empty while pytest's _rewrite_test (its import hook's) or the checks rewrite a file
        self._tools = self._monitoring_tools()
        # the modules of the workdir already imported as the checks start are the runner's own:
        # pytest's repository tests pytest, and its pytest runs from the workdir. Nothing the
        # patch adds loads before the checks (they load ahead of plugins, conftest and tests).
        self._runner = set()
        self._runner_names = set(conf.get("runner_modules") or ())
        self._early = []  # workdir modules imported before the checks that are not the runner's own
        for name, mod in list(sys.modules.items()):
            rel = self._rel(_module_file(mod))
            if rel is not None:
                self._runner.add(rel)
                if not self._runners(name, mod):
                    self._early.append((name, rel))

    def _runners(self, name, mod):
        """Whether a module is the test runner's own package (pytest's repository runs its own pytest;
        `python -m pytest` makes pytest/__main__.py the module __main__)."""
        spec_name = _getattr(_getattr(mod, "__spec__", None), "name", None) or name
        return spec_name.split(".")[0] in self._runner_names

    def startup(self, how=None, scan=True):
        """Code of the workdir imported at interpreter start-up, before the runner plugin: whatever its form
        (a package named sitecustomize, a module a .pth line imports), it is found by what was imported and
        where its code lives, not by its file name. scan: also modules of the workdir imported since the
        checks started that the runner plugin did not import (the hooks a start-up chain imports).
        how(name): what started that module's import, where the start-up tracker saw it (None: nothing
        the runner did), fields the grader judges it by (plugin_findings.of_the_patch)."""
        seen = set(n for n, _ in self._early)
        for name, mod in list(sys.modules.items()) if scan else ():
            rel = self._rel(_module_file(mod))
            if rel is not None and name not in seen and rel not in self._runner and not self._runners(name, mod):
                self._early.append((name, rel))
                seen.add(name)
        for name, rel in self._early:
            started = how(name) if how is not None else None
            if started:
                detail = "module %s of %s was imported before the grader's plugin, by the plugin %s pytest loaded " \
                         "for a -p option%s" % (name, rel, started["by"], " of " + started["ini"] if "ini" in started
                                                else " no configuration of the workdir names")
            else:
                detail = "module %s of %s was imported at interpreter start-up" % (name, rel)
            self._say(None, "hook", detail, rel, started)

    def skipped_site(self, rel):
        """The workdir's sitecustomize, which the channel's start-up module did not chain to."""
        if rel is not None:
            self._say(None, "hook", "the start-up hook sitecustomize of %s would come next on the path" % rel, rel)

    # --- where code lives -------------------------------------------------------------------

    def _rel(self, path):
        if not self.wd or not path:
            return None
        p = _realpath(path)
        return p[len(self.wd):] if p.startswith(self.wd) else None

    def test_side(self, rel):
        """A file of the tests by the grader's rules (grading.tamper): not the code under test."""
        parts = rel.split(os.sep)
        name, dirs = parts[-1], parts[:-1]
        if name == "conftest.py" or name.startswith("test_") or name.endswith("_test.py"):
            return True
        if any(d in self.dirs for d in dirs):
            return True
        return any(d in self.shallow and (i == 0 or dirs[:i] == ["src"]) for i, d in enumerate(dirs))

    def code_side(self, path):
        """Whether `path` is code under test: in the workdir, not a test file, not the runner's."""
        rel = self._rel(path)
        return rel is not None and rel not in self._runner and not self.test_side(rel)

    def made_here(self, obj):
        """Whether the code under test defines the type of `obj` (or a class it derives from)."""
        return self.made_here_type(_type(obj))

    def made_here_type(self, t):
        try:
            return self._made[t]
        except KeyError:
            pass
        except TypeError:  # an unhashable metaclass
            return False
        found = None
        for k in _getattr(t, "__mro__", (t,)):
            found = self.home_of(k)
            if found is not None:
                break
        self._made[t] = found is not None
        return found is not None

    def home_of(self, k):
        """The workdir file (relative) that defines class k, or None: judged by where its code lives, not
        by the module it names. Its methods' code files (a class can name any module in `__module__`), the
        module it names as loaded, and a class that names a module it is not found in under its qualname
        while its Python methods come from another file (a class compiled under a borrowed file name)."""
        mod = sys.modules.get(_getattr(k, "__module__", None) or "")
        mod_file = _getattr(mod, "__file__", None)
        if self.code_side(mod_file):
            return self._rel(mod_file)
        files = []
        for v in list(_getattr(k, "__dict__", {}).values()):
            try:
                fn = _getattr(v, "fget", None) or _getattr(v, "__func__", v)
                f = _getattr(_getattr(fn, "__code__", None), "co_filename", None)
            except Exception:
                continue
            if f is not None and f not in files:
                files.append(f)
        for f in files:
            if self.code_side(f):
                return self._rel(f)
        if files and not self._placed(mod, k):
            own = _realpath(mod_file) if mod_file else None
            if own and own.endswith((".pyc", ".pyo")):
                own = own[:-1]
            stray = [f for f in files if _realpath(f) != own]
            if stray:
                return stray[0]
        return None

    def _placed(self, mod, k):
        """Whether class k is found in the module it names under its qualname."""
        obj = mod
        for part in (_getattr(k, "__qualname__", None) or "?").split("."):
            obj = _getattr(obj, part, None)
            if obj is None:
                return False
        return obj is k

    def _say(self, test, what, detail, file=None, extra=None):
        """Record a finding; `file`: the workdir file (relative) whose code it is about."""
        key = (test, what, detail)
        if key not in self._said:
            self._said.add(key)
            rec = dict(extra or {})
            rec.update({"t": test or "", "w": what, "x": detail})
            if file is not None:
                rec["f"] = file
            self.emit(rec)

    # --- the tests that run are the tests the grader placed ----------------------------------------

    def _read(self, path):
        """The test file's bytes, or what is wrong with it: unreadable, or not what the grader placed."""
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except (OSError, IOError):
            return None, "its file %s cannot be read" % path
        want = self.manifest.get(_realpath(path))
        if want is not None and hashlib.sha256(data).hexdigest() != want:
            return None, "its file %s changed on disk since the grader placed it" % self._rel(path)
        return data, None

    def _codes(self, path, module, data, every_variant):
        """(codes by qualname, every code) the file compiles to: as pytest's rewriter compiled it at import
        (a module it rewrote) or plainly; every_variant: both, and the rewriter run here when pytest's
        own result was not seen. None: the file does not compile."""
        rewritten = "@pytest_ar" in _getattr(module, "__dict__", {})  # a module pytest's rewriter compiled
        seen = self._rewritten.get(_realpath(path)) if rewritten else None
        variants = [seen] if seen is not None else []
        if every_variant or not variants:
            try:
                variants.append(compile(data, path, "exec", dont_inherit=True))
            except Exception:
                return None
        if rewritten and seen is None and self.rewrite is not None:  # rewrite it here, as pytest would
            try:
                tree = ast.parse(data, filename=path)
                self._hooked.append(True)
                try:
                    self.rewrite(tree, data, path, self.rewrite_config)
                except TypeError:  # pytest < 5: rewrite_asserts(mod, module_path, config)
                    self.rewrite(tree, path, self.rewrite_config)
                finally:
                    self._hooked.pop()
                variants.append(compile(tree, path, "exec", dont_inherit=True))
            except Exception:
                pass
        codes, every = {}, []
        for co in variants:
            _walk_code(co, "", codes, every)
        return codes, every

    def _compile(self, path, module, data):
        """(codes by qualname, decorated qualnames, every code) of every way the file compiles, or None."""
        found = self._codes(path, module, data, True)
        decorated = set()
        try:
            _walk_ast(ast.parse(data, filename=path).body, "", decorated)
        except Exception:
            return None
        return None if found is None else (found[0], decorated, found[1])

    def verify(self, test, module, cls, name, called):
        """The test about to run (its module, class or None, function name, the function called)."""
        if cls is not None:
            home_cls = next((k for k in _getattr(cls, "__mro__", ()) if name in _getattr(k, "__dict__", {})), None)
            if home_cls is None:
                return
            bound = home_cls.__dict__[name]
            home = sys.modules.get(_getattr(home_cls, "__module__", None) or "")
            qual = "%s.%s" % (_getattr(home_cls, "__qualname__", home_cls.__name__), name)
        else:
            home, qual = module, name
            bound = _getattr(module, "__dict__", {}).get(name)
        path = _getattr(home, "__file__", None)
        if self._rel(path) is None:
            return  # a test from outside the workdir (an installed base class)
        path = _realpath(path)
        if path.endswith((".pyc", ".pyo")):
            path = path[:-1]
        loader = _getattr(_getattr(home, "__spec__", None), "loader", None) or _getattr(home, "__loader__", None)
        loader_file = _getattr(sys.modules.get(_getattr(_type(loader), "__module__", "")), "__file__", None)
        if loader is not None and self.code_side(loader_file):
            return self._say(test, "repl", "its module was loaded by %s of %s" % (
                _type(loader).__name__, self._rel(loader_file)))
        raw_fn = _getattr(bound, "__func__", bound)
        called_fn = _getattr(called, "__func__", called)
        seen = self._good.get((path, qual))
        if seen is not None and seen[0] is raw_fn and seen[1] is called_fn and seen[2] is _getattr(
                raw_fn, "__code__", None):
            return
        if path not in self._files:
            data, problem = self._read(path)
            self._files[path] = problem or [data, self._codes(path, home, data, False), None]
        info = self._files[path]
        if _isinstance(info, str):
            return self._say(test, "repl", info)
        data, quick, full = info
        # the usual case, at the cost of one compile pytest already made: the function bound and the one
        # called are the code compiled from the file. Only otherwise is the file parsed, and compiled
        # every way it may have been (a decorated test is judged by what its wrappers reach)
        if quick is not None and qual in quick[0] and _judge(qual, raw_fn, called_fn, quick[0], (), quick[1],
                                                               path) is None:
            self._good[(path, qual)] = (raw_fn, called_fn, _getattr(raw_fn, "__code__", None))
            return
        if full is None:
            full = info[2] = self._compile(path, home, data) or ()
        if not full:
            return
        codes, decorated, every = full
        if qual not in codes:
            return  # made at run time by the test file itself: nothing in the source to compare with
        problem = _judge(qual, raw_fn, called_fn, codes, decorated, every, path)
        if problem:
            return self._say(test, "repl", problem)
        self._good[(path, qual)] = (raw_fn, called_fn, _getattr(raw_fn, "__code__", None))

    def hooks(self, test):
        """A trace or profile function of the code under test (it can skip a test's lines)."""
        import threading
        found = [("trace function", sys.gettrace()), ("profile function", sys.getprofile()),
                 ("thread trace function", _getattr(threading, "_trace_hook", None)),
                 ("thread profile function", _getattr(threading, "_profile_hook", None))]
        mon = _getattr(sys, "monitoring", None)
        if mon is not None:
            for tool in range(6):
                if mon.get_tool(tool) is None or tool in self._tools:
                    continue
                for ev in _monitoring_events(mon):
                    try:
                        fn = mon.register_callback(tool, ev, None)
                        mon.register_callback(tool, ev, fn)
                    except Exception:
                        continue
                    found.append(("sys.monitoring callback", fn))
        for what, fn in found:
            f = _code_file(fn)
            if f is not None and self.code_side(f):
                self._say(test, "repl", "a %s of %s is set" % (what, self._rel(f)))

    def _monitoring_tools(self):
        mon = _getattr(sys, "monitoring", None)
        return set(t for t in range(6) if mon is not None and mon.get_tool(t) is not None)

    # --- no vacuous assertions --------------------------------------------------------------

    def probe(self, test, op, left, right):
        """After a comparison a test asserted held: whether an operand the code under test made holds the
        same comparison with anything."""
        for side, x in (("left", left), ("right", right)):
            if not self.made_here(x):
                continue
            hit = None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for s in self._sentinels(x):
                    try:
                        if op in ("in", "not in") and side == "left":
                            r, want = x == s, True  # `x in c` holds where x equals c's items
                        else:
                            r = _OPS[op](x, s) if side == "left" else _OPS[op](s, x)
                            want = op not in ("!=", "not in")
                        hold = self._truthy(r) if want else r is False
                    except Exception:
                        continue
                    if hold:
                        hit = s
                        break
            if hit is not None:
                home = next((h for h in map(self.home_of, _getattr(_type(x), "__mro__", ())) if h), "?")
                self._say(test, "vac", "%s %s %s: the %s operand, a %s of %s, holds it with %s too" % (
                    "x" if side == "right" else "_", op, "x" if side == "left" else "_", side, _type(x).__name__,
                    home, _type(hit).__name__))

    def _sentinels(self, x):
        """Fresh objects no honest value equals: of no type, of the builtin types, and of each type outside
        the code under test that x's type derives from (an `isinstance(other, Decimal)` check holds for them)."""
        n, out = _fresh()
        for s in out:
            yield s
        for k in _getattr(_type(x), "__mro__", ())[1:]:
            if "%s.%s" % (_getattr(k, "__module__", ""), _getattr(k, "__name__", "")) not in _VALUE_TYPES:
                continue
            for arg in (n + 10 ** 15, "%d.5" % n):
                try:
                    yield k(arg)
                    break
                except Exception:
                    continue

    def _truthy(self, r):
        if r is True:
            return True
        t = _type(r)
        try:
            if t in (int, float) or (t.__name__ in ("bool_", "bool") and t.__module__ == "numpy"):
                return bool(r)
            return self.made_here(r) and bool(r)
        except Exception:
            return False

    def _capture_rewrites(self, r):
        """Keep the code pytest's rewriter compiles from each test file as it is imported."""
        orig_rewrite_test, rewritten, hooked = _getattr(r, "_rewrite_test", None), self._rewritten, self._hooked
        if orig_rewrite_test is None:
            return

        def _rewrite_test(*args, **kwargs):
            hooked.append(True)
            try:
                out = orig_rewrite_test(*args, **kwargs)
            finally:
                hooked.pop()
            co = out[-1] if _isinstance(out, tuple) else out
            if _getattr(co, "co_code", None) is not None:
                # the file is the first argument from pytest 5 on, the second before (config, fn)
                for arg in args:
                    if ("%s" % (arg,)).endswith(".py"):
                        rewritten[_realpath("%s" % (arg,))] = co
                        break
            return out

        r._rewrite_test = _rewrite_test

    def install_pytest(self):
        """Probe every comparison a rewritten assert found true: pytest's rewriter compiles each test module
        (rewrite_asserts, called by _rewrite_test from its import hook), and the tree it made gets, for
        each assert, a branch taken when the assert holds that hands the comparisons' operands (the ones
        its failure branch would explain) to the probe. No pass hook of pytest's is needed (every
        pytest >= 3 rewrites this way) and nothing is built for a passing assert's explanation. The
        bytecode pytest caches for test modules gets a name of its own (PYC_TAIL): a module cached
        without the probes is not read, one cached with them is read by no run without the plugin."""
        r = sys.modules.get("_pytest.assertion.rewrite")
        if r is None:
            return False
        self._capture_rewrites(r)  # every pytest: the replaced-test check compares with these
        orig_rewrite, me, hooked = _getattr(r, "rewrite_asserts", None), self, self._hooked
        if orig_rewrite is None or _getattr(r, "_call_reprcompare", None) is None:
            return False

        def _probe_compare(ops, results, each_obj):
            try:
                if all(results):
                    test = me.current()
                    for i, op in enumerate(ops):
                        me.probe(test, op, each_obj[i], each_obj[i + 1])
            except Exception:
                pass

        def rewrite_asserts(mod, *args, **kwargs):
            out = orig_rewrite(mod, *args, **kwargs)
            if hooked:  # the import hook's rewrite (a test of the rewriter calling it gets pytest's own)
                try:
                    _add_probes(mod)
                except Exception:
                    pass
            return out

        rewrite_asserts.__doc__ = orig_rewrite.__doc__
        r._sbv_probe_compare, r.rewrite_asserts = _probe_compare, rewrite_asserts
        self.rewrite = rewrite_asserts  # a module loaded from elsewhere is compiled here as pytest compiled it
        tail = _getattr(r, "PYC_TAIL", None)
        if _isinstance(tail, str) and tail.startswith("."):
            r.PYC_TAIL = ".sbv-" + tail[1:]
        return True

    def install_unittest(self):
        """Wrap unittest's comparing asserts: once one passes, probe its operands."""
        import unittest
        tc, me = unittest.TestCase, self
        for name, op in _UNITTEST_OPS:
            orig = tc.__dict__.get(name)
            if orig is None:
                continue
            setattr(tc, name, _wrap_assert(orig, op, me))


def _is_assert_if(node):
    """The `if not <test>: ... raise AssertionError(_format_explanation(...))` an assert is rewritten into."""
    if not _isinstance(node, ast.If) or not node.body or not _isinstance(node.body[-1], ast.Raise):
        return False
    exc = node.body[-1].exc
    if not _isinstance(exc, ast.Call) or not _isinstance(exc.func, ast.Name) or exc.func.id != "AssertionError":
        return False
    arg = exc.args[0] if exc.args else None
    return _isinstance(arg, ast.Call) and _helper(arg, "_format_explanation")


def _helper(call, name):
    f = call.func
    return _isinstance(f, ast.Attribute) and f.attr == name and _isinstance(f.value, ast.Name) and \
        f.value.id == "@pytest_ar"


def _add_probes(tree):
    """In pytest's rewritten tree: after each assert that holds, the probe gets the operands of each
    comparison its failure branch would explain (`@py_format = _call_reprcompare(ops, results, expls,
    each_obj) % {...}`), inside a try (a comparison a boolean operator skipped has no operands bound).
    Only statements are walked: an assert is one, and so is each explanation its failure branch builds."""
    for node in _statements(tree.body):
        if not _is_assert_if(node):
            continue
        for c in _reprcompares(node.body):
            probe = _at(node, ast.Call(_at(node, ast.Attribute(_at(node, ast.Name("@pytest_ar", ast.Load())),
                                                               "_sbv_probe_compare", ast.Load())),
                                       [c.args[0], c.args[1], c.args[3]], []))
            handler = _at(node, ast.ExceptHandler(_at(node, ast.Name("Exception", ast.Load())), None,
                                                  [_at(node, ast.Pass())]))
            node.orelse.append(_at(node, ast.Try([_at(node, ast.Expr(probe))], [handler], [], [])))


def _statements(body):
    for node in body:
        yield node
        for attr in ("body", "orelse", "finalbody"):
            sub = _getattr(node, attr, None)
            if _isinstance(sub, list):
                for n in _statements(sub):
                    yield n
        for h in list(_getattr(node, "handlers", None) or ()) + list(_getattr(node, "cases", None) or ()):
            for n in _statements(h.body):
                yield n


def _reprcompares(body):
    for node in _statements(body):
        value = _getattr(node, "value", None) if _isinstance(node, ast.Assign) else None
        call = value.left if _isinstance(value, ast.BinOp) else value
        if _isinstance(call, ast.Call) and _helper(call, "_call_reprcompare") and len(call.args) == 4:
            yield call


def _at(where, node):
    for attr in ("lineno", "col_offset", "end_lineno", "end_col_offset"):
        if attr in node._attributes and hasattr(where, attr):
            setattr(node, attr, _getattr(where, attr))
    return node


def _wrap_assert(orig, op, checks):
    def assert_(self, first, second, *args, **kwargs):
        out = orig(self, first, second, *args, **kwargs)
        try:
            checks.probe(checks.current(), op, first, second)
        except Exception:
            pass
        return out

    assert_.__name__, assert_.__doc__ = orig.__name__, orig.__doc__
    assert_.__qualname__ = _getattr(orig, "__qualname__", orig.__name__)
    return assert_


def _fresh():
    n = int.from_bytes(os.urandom(6), "big")
    return n, (_Sentinel(), object(), "\x00sbv-%d" % n, n + 10 ** 15, float(n) + 0.5, (n,), b"\x00%d" % n)


def _walk_code(co, prefix, codes, every):
    for c in co.co_consts:
        if _getattr(c, "co_code", None) is None:
            continue
        every.append(c)
        q = prefix + c.co_name
        if c.co_flags & _OPTIMIZED:
            codes.setdefault(q, []).append(c)
            _walk_code(c, q + ".<locals>.", {}, every)
        else:  # a class body
            _walk_code(c, q + ".", codes, every)


def _walk_ast(body, prefix, decorated):
    for node in body:
        if _isinstance(node, (ast.FunctionDef, _getattr(ast, "AsyncFunctionDef", ast.FunctionDef))):
            if node.decorator_list:
                decorated.add(prefix + node.name)
        elif _isinstance(node, ast.ClassDef):
            _walk_ast(node.body, prefix + node.name + ".", decorated)
        else:
            for attr in ("body", "orelse", "finalbody"):
                sub = _getattr(node, attr, None)
                if _isinstance(sub, list):
                    _walk_ast(sub, prefix, decorated)
            for h in _getattr(node, "handlers", None) or ():
                _walk_ast(h.body, prefix, decorated)


def _chain(fn):
    """The functions reachable from a decorated test: __wrapped__ links and closure cells."""
    out, todo = [], [fn]
    while todo and len(out) < 32:
        f = todo.pop()
        f = _getattr(f, "__func__", f)
        if f is None or any(f is g for g in out):
            continue
        out.append(f)
        nxt = _getattr(f, "__wrapped__", None)
        if nxt is not None:
            todo.append(nxt)
        nxt = _getattr(_getattr(f, "__pytest_wrapped__", None), "obj", None)
        if nxt is not None:
            todo.append(nxt)
        for cell in _getattr(f, "__closure__", None) or ():
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            if _getattr(v, "__code__", None) is not None or _getattr(v, "__func__", None) is not None:
                todo.append(v)
    return out


def _judge(qual, raw_fn, called_fn, codes, decorated, every, path):
    genuine = codes[qual]
    if qual not in decorated:  # a plain def: what runs is exactly the function its file compiles to
        for what, f in (("bound", raw_fn), ("called", called_fn)):
            co = _getattr(f, "__code__", None)
            if co is None or not any(co == g for g in genuine) or _realpath(co.co_filename) != path:
                where = _realpath(co.co_filename) if co is not None else _type(f).__name__
                return "%s: the function %s is not the code of its file (its code: %s)" % (qual, what, where)
        return None
    ours = [f for f in _chain(raw_fn) if _realpath(_getattr(_getattr(f, "__code__", None), "co_filename", "")) == path]
    for f in ours:
        if not any(f.__code__ == g for g in every):
            return "%s: a function of its file was given other code" % qual
    return None


def _module_file(mod):
    """Where a module's code was loaded from: its __file__, else its spec's origin (a module may drop or
    rewrite its __file__; the spec the import system made keeps the loader's origin)."""
    try:
        spec = _getattr(mod, "__spec__", None)
        origin = _getattr(spec, "origin", None) if _getattr(spec, "has_location", False) else None
        return origin or _getattr(mod, "__file__", None)
    except Exception:
        return None


def _code_file(fn):
    if fn is None:
        return None
    f = _getattr(fn, "__func__", fn)
    co = _getattr(f, "__code__", None)
    if co is None:
        call = _getattr(_type(fn), "__call__", None)
        co = _getattr(_getattr(call, "__func__", call), "__code__", None)
    return _getattr(co, "co_filename", None)


def _monitoring_events(mon):
    ev = mon.events
    return [v for k, v in sorted(vars(ev).items()) if k.isupper() and k not in ("NO_EVENTS",) and
            _isinstance(v, int) and v and not (v & (v - 1))]
