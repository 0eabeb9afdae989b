"""A second record of the tests' outcomes, from the runner's own reporter, outside the workdir.

The log a test run prints is also where the code under test prints: a module can write
`✓ <test name>` lines and exit 0 before the runner reports its failures. For runners that
can write a structured report of their own, the grader adds that report to the row's test
command, under a random name in the sandbox's scratch directory (outside the workdir, so
the patch can neither ship it nor name it), and reads it after the run: a test the log
parser read as passed that the report does not have as passed (failed, skipped, missing,
or no report at all) counts as failed, with a `tampering` entry of kind `report_rewritten`
naming the test.

Runners: Jest (`--json --outputFile`), when the test command is a single `jest`
invocation (`jest`, `npx jest`, `yarn jest`, `pnpm exec jest`, `./node_modules/.bin/jest`,
with leading variable assignments) that does not already ask for JSON or use the shell
(pipes, `&&`, `;`, redirections). docs/benchmarks.md ("Other runners") says what the other
runners have instead.
"""

from __future__ import annotations

import json
import re
import secrets
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from ..rollout.records import GradeRecord
    from ..sandbox import Sandbox

KIND = "report_rewritten"


def _jest(text: str) -> dict[str, str]:
    """Jest's --json report: test title (as the verbose reporter prints it) and full name -> status;
    a name that several tests share is passed only when all of them passed."""
    status = {"passed": "PASSED", "failed": "FAILED"}
    out: dict[str, str] = {}
    for suite in json.loads(text).get("testResults") or []:
        for test in suite.get("assertionResults") or []:
            st = status.get(test.get("status"), "SKIPPED")
            for name in {test.get("title"), test.get("fullName")} - {None, ""}:
                out[name] = st if out.get(name, "PASSED") == "PASSED" else out[name]
    return out


@dataclass(frozen=True)
class Runner:
    name: str
    command: re.Pattern[str]  # a script line that runs it
    refuse: re.Pattern[str]  # a line it cannot be added to
    flags: Callable[[str], str]  # the arguments that write the report to a path
    read: Callable[[str], dict[str, str]]


_ENV = r"^\s*(?:[A-Za-z_][A-Za-z0-9_]*=(?:\"[^\"]*\"|'[^']*'|\S*)\s+)*"
RUNNERS = (
    Runner("jest", re.compile(_ENV + r"(?:(?:npx|yarn|pnpm\s+exec)\s+)?(?:\./node_modules/\.bin/)?jest(?:\s|$)"),
           re.compile(r"[|;&<>`]|--json\b|--outputFile\b"),
           lambda path: f" --json --outputFile={shlex.quote(path)}", _jest),
)


@dataclass(frozen=True)
class Channel:
    runner: Runner
    path: str  # in the sandbox, outside the workdir


def instrument(script: str, start: str, end: str, scratch: str) -> tuple[str, Channel | None]:
    """The eval script with a report added to its test command (the lines between the markers
    `start` and `end`), and where the report will be; (script, None) when no runner allows it."""
    lines = script.split("\n")
    inside = False
    for i, line in enumerate(lines):
        if start in line or end in line:
            inside = start in line
            continue
        if not inside:
            continue
        for runner in RUNNERS:
            if runner.command.match(line) and not runner.refuse.search(line):
                path = f"{scratch.rstrip('/')}/{runner.name}-report-{secrets.token_hex(8)}.json"
                lines[i] = line.rstrip() + runner.flags(path)
                return "\n".join(lines), Channel(runner, path)
    return script, None


async def reconcile(sandbox: "Sandbox", channel: Channel | None, status: dict[str, str], rec: "GradeRecord",
                    log: list[str]) -> dict[str, str]:
    """`status` (the log parser's) with every test the runner's report does not confirm as passed
    counted failed, each recorded in rec.tampering."""
    if channel is None:
        return status
    try:
        report: dict[str, str] | None = channel.runner.read(
            (await sandbox.download(channel.path)).decode("utf-8", "replace"))
    except Exception:  # noqa: BLE001 - no report, or not the runner's: nothing it confirms
        report = None
    out = dict(status)
    for name, st in status.items():
        if st == "PASSED" and (report or {}).get(name) != "PASSED":
            out[name] = "FAILED"
            rec.tampering.append({"path": name, "kind": KIND, "action": "counted_failed"})
            said = "is missing" if report is None else f"has it {(report.get(name) or 'not at all').lower()}"
            log.append(f"{channel.runner.name}: the log says {name!r} passed; its own report {said}")
    return out
