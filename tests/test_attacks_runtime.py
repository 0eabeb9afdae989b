"""Attacks on the verdict from inside the test process: the code under test patches the runner
at run time, or forges the output the log parser reads.

Each case is a hostile patch on smoke__calc-1: a wrong fix of divide() (its F2P test still
fails) plus code that makes the real pytest report success anyway. Graded by the real grade
step on the local provider with the swebench package's grader, each earns 1.0 with the
defences off (grading.tampering: log_only, the benchmark harness's own reading of the log)
and 0.0 with them on, with the tampering kinds listed.
"""

from __future__ import annotations

import textwrap

import pytest

from sandbatch import config
from sandbatch.tasks import get_task
from test_benchmark_grading import SMOKE, grade, make_cfg
from test_tampering import PASS_ALL_HOOK, agent_patch

WRONG_CALC = '''"""Small arithmetic helpers used by the report generator."""
import sys


def add(a, b):
    return a + b


def subtract(a, b):
    return a - b


def divide(a, b):
    """Divide a by b; raises ZeroDivisionError when b is 0."""
    return round(a / b)
'''
TESTS = ("test_add", "test_subtract", "test_divide", "test_divide_by_zero")
FAKE_LINES = "".join(f"PASSED tests/test_calc.py::{t}\\n" for t in TESTS)
# pytest captures fd 1 and 2 while it imports and runs tests; what it saved of the real ones are
# the pipes the grader reads
REAL_OUT = """
import os
def _real_outs():
    fds = []
    for fd in sorted(int(f) for f in os.listdir("/proc/self/fd")):
        try:
            if fd > 2 and os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                fds.append(fd)
        except OSError:
            pass
    return fds or [1]
"""
FORCE_EXIT_0 = """
import atexit, os
def _exit_ok():
    sys.stdout.flush()
    os._exit(0)
atexit.register(_exit_ok)
"""


def hostile(code: str) -> str:
    """calc.py: the wrong fix, and `code` run when calc is imported under pytest."""
    return WRONG_CALC + "\n\nif 'pytest' in sys.modules:\n" + textwrap.indent(textwrap.dedent(code), "    ") + "\n"


# --- runtime patching of the runner from code under test -----------------------------------

REWRITE_REPORTS = """
from _pytest.reports import TestReport
_made = TestReport.from_item_and_call.__func__
def _pass(cls, item, call):
    rep = _made(cls, item, call)
    rep.outcome, rep.longrepr = "passed", None
    return rep
TestReport.from_item_and_call = classmethod(_pass)
"""

RUNTIME = {
    # the second attack: report construction rewritten by the package under test
    "report construction (TestReport.from_item_and_call)": (REWRITE_REPORTS, {"report_rewritten", "runner_patched"}),
    "outcome mapping (a class property over TestReport.outcome)": ("""
        from _pytest.reports import TestReport
        def _get(self):
            out = self.__dict__.get("outcome")
            return "passed" if out == "failed" and self.when == "call" else out
        TestReport.outcome = property(_get, lambda self, v: self.__dict__.__setitem__("outcome", v))
        """, {"report_rewritten", "runner_patched"}),
    "hook caller (pluggy HookCaller.__call__ filters makereport)": ("""
        import pluggy._hooks as _h
        _call = _h.HookCaller.__call__
        def _filtered(self, **kwargs):
            res = _call(self, **kwargs)
            if self.name == "pytest_runtest_makereport" and res is not None:
                res.outcome, res.longrepr = "passed", None
            return res
        _h.HookCaller.__call__ = _filtered
        """, {"report_rewritten", "runner_patched"}),
    "call wrapping (Function.runtest swallows the assertion)": ("""
        from _pytest.python import Function
        _run = Function.runtest
        def _quiet(self):
            try:
                _run(self)
            except AssertionError:
                pass
        Function.runtest = _quiet
        """, {"runner_patched"}),
    "raw call (CallInfo.from_call drops the exception)": ("""
        from _pytest.runner import CallInfo
        _from = CallInfo.from_call
        def _clean(cls, func, when, reraise=None):
            call = _from(func, when, reraise)
            call.excinfo = None
            return call
        CallInfo.from_call = classmethod(_clean)
        """, {"report_rewritten", "runner_patched"}),
    "plugin registered on the live session (found through gc)": ("""
        import gc
        import pytest as _pt
        class _PassAll:
            @_pt.hookimpl(hookwrapper=True)
            def pytest_runtest_makereport(self, item, call):
                outcome = yield
                rep = outcome.get_result()
                rep.outcome, rep.longrepr = "passed", None
        for _o in gc.get_objects():
            if type(_o).__name__ == "Config" and hasattr(_o, "pluginmanager"):
                _o.pluginmanager.register(_PassAll(), "calc-helper")
                break
        """, {"report_rewritten", "runner_patched"}),
    "terminal reporter summary rewritten, exit status forced to 0": ("""
        from _pytest.terminal import TerminalReporter
        _short = TerminalReporter.short_test_summary
        def _all_passed(self):
            for rep in self.stats.pop("failed", []):
                rep.outcome = "passed"
                self.stats.setdefault("passed", []).append(rep)
            _short(self)
        TerminalReporter.short_test_summary = _all_passed
        """ + textwrap.indent(FORCE_EXIT_0, " " * 8), {"report_rewritten", "runner_patched"}),
}

# --- forged output -----------------------------------------------------------------------------

FORGED = {
    "fake PASSED lines and os._exit(0) at import": (REAL_OUT + textwrap.dedent(f"""
        os.write(_real_outs()[0], b"{FAKE_LINES}")
        os._exit(0)
        """), {"runner_patched"}),
    "fake PASSED lines after the real summary, exit forced to 0": (f"""
        import atexit, os
        def _forge():
            sys.stdout.write("{FAKE_LINES}")
            sys.stdout.flush()
            os._exit(0)
        atexit.register(_forge)
        """, {"report_rewritten", "inconsistent_log"}),
    "a suite that collects nothing, with fake PASSED lines": (f"""
        import atexit, os
        import pytest as _pt
        def _forge():
            sys.stdout.write("{FAKE_LINES}")
            sys.stdout.flush()
            os._exit(0)
        atexit.register(_forge)
        _pt.skip("not here", allow_module_level=True)  # the importing test module collects nothing
        """, {"report_rewritten", "inconsistent_log"}),
    "early exit with status 0 from inside the failing test": (REAL_OUT + textwrap.dedent(f"""
        _divide = divide
        def divide(a, b):
            if (a, b) == (7, 2):  # only the case the fix gets wrong
                os.write(_real_outs()[0], b"\\n{FAKE_LINES}")
                os._exit(0)
            return _divide(a, b)
        """), {"runner_patched", "inconsistent_log"}),
    "an output filter on the process's stdout (fd 1) rewriting failures": (REAL_OUT + textwrap.dedent("""
        import atexit, re, threading
        _outs = [1, 2, *_real_outs()]
        _real = os.dup(_outs[-1])
        _r, _w = os.pipe()
        for _fd in _outs:  # every descriptor pytest writes the terminal through, now into the filter
            os.dup2(_w, _fd)
        def _pump():
            buf = b""
            while True:
                chunk = os.read(_r, 65536)
                if not chunk:
                    break
                buf += chunk
                *lines, buf = buf.split(b"\\n")
                for line in lines:
                    line = line.replace(b"FAILED", b"PASSED").split(b" - ")[0]
                    line = re.sub(rb"1 failed, 3 passed", b"4 passed", line)
                    os.write(_real, line + b"\\n")
            os.write(_real, buf)
        _t = threading.Thread(target=_pump, daemon=True)
        _t.start()
        def _done():
            sys.stdout.flush()
            sys.stderr.flush()
            for _fd in {*_outs, _w}:
                try:
                    os.close(_fd)
                except OSError:
                    pass
            _t.join(5)
            os._exit(0)
        atexit.register(_done)
        """), {"report_rewritten"}),
    "forged records appended to the grader's open verdict file": (textwrap.dedent("""
        import json, os
        for _fd in os.listdir("/proc/self/fd"):
            try:
                _target = os.readlink(f"/proc/self/fd/{_fd}")
            except OSError:
                continue
            if _target.endswith(".jsonl"):
                for _t in ("test_add", "test_subtract", "test_divide", "test_divide_by_zero"):
                    _rec = json.dumps({"t": f"tests/test_calc.py::{_t}", "w": "call", "k": "ok"})
                    os.write(int(_fd), (json.dumps({"r": _rec, "m": "0" * 64}) + "\\n").encode())
        """) + REWRITE_REPORTS, {"runner_patched"}),
}

# the first attack: a pytest plugin loaded through installation metadata in the workdir
# (the runner discovers plugins from the distributions it finds on sys.path)
ENTRY_POINT_FILES = {
    "calc_helpers.py": PASS_ALL_HOOK,
    "calc_helpers-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: calc-helpers\nVersion: 0.1\n",
    "calc_helpers-0.1.dist-info/entry_points.txt": "[pytest11]\ncalc_helpers = calc_helpers\n",
}

CASES = {
    **{name: ({"calc.py": hostile(code)}, kinds) for name, (code, kinds) in {**RUNTIME, **FORGED}.items()},
    "pytest plugin through an entry point of a dist-info in the workdir": (
        {"calc.py": WRONG_CALC, **ENTRY_POINT_FILES}, {"report_rewritten"}),
}
assert len(RUNTIME) >= 5 and len(FORGED) >= 5


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def calc(tmp_path):
    (tmp_path / "on").mkdir()
    cfg_path = make_cfg(tmp_path / "on", "smoke", SMOKE)
    return cfg_path, get_task(config.Config.model_validate_json(cfg_path.read_text()).benchmark, "smoke__calc-1")


@pytest.mark.parametrize("name", sorted(CASES))
def test_attack_earns_reward_only_without_the_defences(tmp_path, calc, name):
    cfg_path, task = calc
    files, kinds = CASES[name]
    patch, _ = agent_patch(tmp_path, task.repo_dir, files=files)
    off = tmp_path / "off"
    off.mkdir()
    undefended = grade(make_cfg(off, "smoke", SMOKE, grading={"tampering": "log_only"}), task.id, patch)
    assert undefended.reward == 1.0 and undefended.tampering == [], undefended
    rec = grade(cfg_path, task.id, patch)
    assert rec.status == "ok" and rec.reward == 0.0 and not rec.resolved, rec
    assert kinds <= {t["kind"] for t in rec.tampering}, rec.tampering
    if "report_rewritten" in kinds:  # the test whose report was rewritten counts as failed
        assert "tests/test_calc.py::test_divide" in rec.tests_status["FAIL_TO_PASS"]["failure"], rec.tests_status
