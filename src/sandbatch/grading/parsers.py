"""Test-log parsers: log text -> {test name: status}."""

from __future__ import annotations

import re
from typing import Callable

_PYTEST = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(\S+)")


def parse_pytest(log: str) -> dict[str, str]:
    """The short test summary of `pytest -rA`: `PASSED tests/x.py::test_a`, `FAILED ... - msg`."""
    results: dict[str, str] = {}
    for line in log.splitlines():
        m = _PYTEST.match(line.strip())
        if m:
            results[m.group(2)] = m.group(1)
    return results


PARSERS: dict[str, Callable[[str], dict[str, str]]] = {"pytest": parse_pytest}
