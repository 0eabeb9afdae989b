"""The verdict channel for unittest runners (Django's tests/runtests.py, `python -m unittest`,
anything that runs tests through unittest.TestCase.run under a unittest.TestResult):
docs/benchmarks.md, "The verdict channel".

The same channel as pytest's (verdict.Channel: a random directory outside the workdir, records
written into a pipe root drains, the tests run as a user of their own, an end record), loaded
by the interpreter itself: the plugin
(unittest_plugin.py) is that directory's `sitecustomize.py`, and the directory goes first on
PYTHONPATH for the test command. The verdict's test names are those unittest's runner prints,
so the row's own log parser reads them (as_log).
"""

from __future__ import annotations

from . import in_sandbox
from .verdict import Channel

PLUGIN_SOURCE = in_sandbox.HERE / "unittest_plugin.py"
PARSERS = {"parse_log_django"}  # swebench's parsers of unittest's verbose output
# a raw outcome as unittest's verbose runner prints it
_WORDS = {"PASSED": "ok", "FAILED": "FAIL", "ERROR": "ERROR", "SKIPPED": "skipped", "XFAIL": "expected failure"}


class UnittestChannel(Channel):
    def plugin(self) -> tuple[str, bytes]:
        return "sitecustomize.py", PLUGIN_SOURCE.read_bytes()

    def exports(self) -> str:
        return f"{self.manifest()}\n{self.pythonpath()}"


def for_parser(parser: str) -> type[Channel]:
    """The channel for a row whose log the named swebench parser reads."""
    return UnittestChannel if parser in PARSERS else Channel


def as_log(seen: dict[str, str]) -> str:
    """The verdict's {test: status} as unittest's verbose runner would have printed it."""
    return "\n".join(f"{test} ... {_WORDS.get(s, 'FAIL')}" for test, s in seen.items())
