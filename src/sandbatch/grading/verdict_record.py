"""One test run's verdict as read back (verdict.py parses and merges it): what each test's raw
call did, what of the runner was replaced, what the plugins' own checks found. Apart from
verdict.py so that what compares it (plugin_findings.py) needs not import its reader.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Verdict:
    state: str  # ok | missing | garbled | incomplete | unsupported
    outcomes: dict[str, str] = field(default_factory=dict)  # nodeid -> ok | raised | error | skipped | xfailed
    expected_failures: set[str] = field(default_factory=set)  # tests marked xfail
    changed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    rootdirs: list[str] = field(default_factory=list)
    files: set[str] = field(default_factory=set)  # the files and directories the sessions collected
    detail: str = ""
    findings: list[dict] = field(default_factory=list)  # {t, w: repl | vac, x}: run_checks' records
    asserts: list[str] = field(default_factory=list)  # assertion machinery replaced during the run
    exits: list[int | None] = field(default_factory=list)  # each pytest process's own exit status, as it ended
    isolation: str = ""  # "separated": the tests ran as a user of their own; else why not
    records: dict[str, list[str]] = field(default_factory=dict)  # build_phase's records, by name
