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
(pipes, `&&`, `;`, redirections); or a package script (`npm test`, `yarn test`, `pnpm run test`)
whose script in the workdir's package.json, as the base has it, is such a command (the
arguments reach Jest through the package manager). docs/benchmarks.md ("Other runners") says what the other
runners have instead.

Jest's report is written from the results its test processes send, and the code under test
runs in those processes: it can make `expect` vacuous there (nothing throws, every test passes).
So each of the task's test files gets a canary appended right before the test command: a test
of a random name whose assertion must fail (a random number expected to be the next one). A
report that ran a canary's file and has the canary anything but failed confirms nothing of that
run: every test the log read as passed counts failed, with a `tampering` entry of kind
`canary_passed`. (A test file the command does not run has its canary unrun: nothing to say.)
"""

from __future__ import annotations

import json
import re
import secrets
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from .result import Findings, failed_since

if TYPE_CHECKING:
    from ..sandbox import Sandbox

KIND, CANARY = "report_rewritten", "canary_passed"
FILES = "\0files"  # a key no test name has: the test files a report ran


def _jest(text: str) -> dict[str, str]:
    """Jest's --json report: test title (as the verbose reporter prints it) and full name -> status;
    a name that several tests share is passed only when all of them passed. The test files it ran are
    under the key FILES, as paths joined by newlines."""
    status = {"passed": "PASSED", "failed": "FAILED"}
    out: dict[str, str] = {}
    suites = json.loads(text).get("testResults") or []
    out[FILES] = "\n".join(str(suite.get("name") or "") for suite in suites)
    for suite in suites:
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
    test_file: re.Pattern[str]  # the runner's test files, which get a canary
    canary: Callable[[str, int], str]  # (name, n): a test that must fail, a line appended to a test file


_ENV = r"^\s*(?:[A-Za-z_][A-Za-z0-9_]*=(?:\"[^\"]*\"|'[^']*'|\S*)\s+)*"
RUNNERS = (
    Runner("jest", re.compile(_ENV + r"(?:(?:npx|yarn|pnpm\s+exec)\s+)?(?:\./node_modules/\.bin/)?jest(?:\s|$)"),
           re.compile(r"[|;&<>`]|--json\b|--outputFile\b"),
           lambda path: f" --json --outputFile={shlex.quote(path)}", _jest,
           re.compile(r"(?:^|/)(?:__tests__/.*\.[cm]?[jt]sx?|[^/]*\.(?:test|spec)\.[cm]?[jt]sx?)$"),
           # a global `test` of every Jest environment; an expectation typed as TypeScript accepts it
           lambda name, n: f";test({json.dumps(name)}, () => {{ expect({n}).toBe({n + 1}); }});"),
)


# a package manager running the package's `test` script, which passes on the arguments after it
_PACKAGE_SCRIPT = re.compile(_ENV + r"(npm|pnpm|yarn)\s+(?:(?:run|run-script)\s+)?test(?:\s|$)")


def _through_script(line: str, scripts: dict[str, str]) -> tuple[Runner, str] | None:
    """(runner, what goes between the line and the runner's flags) when `line` runs the package's test
    script and that script is a runner's plain command; npm and pnpm pass on what follows `--`."""
    m = _PACKAGE_SCRIPT.match(line)
    target = scripts.get("test")
    if m is None or not isinstance(target, str):
        return None
    for runner in RUNNERS:
        if runner.command.match(target) and not runner.refuse.search(target):
            return runner, "" if m.group(1) == "yarn" or re.search(r"\s--(?:\s|$)", line) else " --"
    return None


@dataclass(frozen=True)
class Channel:
    runner: Runner
    path: str  # in the sandbox, outside the workdir
    canaries: tuple[tuple[str, str], ...] = ()  # (name, test file) of each test that must fail


def instrument(script: str, start: str, end: str, scratch: str, test_files: list[str] | tuple[str, ...] = (),
               scripts: dict[str, str] | None = None) -> tuple[str, Channel | None]:
    """The eval script with a report added to its test command (the lines between the markers
    `start` and `end`) and a canary appended to each of `test_files` that is the runner's, right
    before the test command; and where the report will be; (script, None) when no runner allows it.
    scripts: the package.json `scripts` of the workdir as the base has it (a package script that runs
    a runner gets the report too)."""
    lines = script.split("\n")
    inside = False
    for i, line in enumerate(lines):
        if start in line or end in line:
            inside = start in line
            continue
        if not inside:
            continue
        found = [(r, "") for r in RUNNERS if r.command.match(line)] or [_through_script(line, scripts or {})]
        for runner, sep in [f for f in found if f is not None]:
            if not runner.refuse.search(line):
                path = f"{scratch.rstrip('/')}/{runner.name}-report-{secrets.token_hex(8)}.json"
                lines[i] = line.rstrip() + sep + runner.flags(path)
                at = next(j for j in range(i, -1, -1) if start in lines[j])
                stop = next((j for j in range(i, len(lines)) if end in lines[j]), len(lines) - 1)
                after = stop + 1 if stop + 1 < len(lines) and lines[stop + 1].startswith("echo ") else stop
                appends, restores, names = _canaries(runner, test_files)
                return "\n".join([*lines[:at], *appends, *lines[at:after + 1], *restores, *lines[after + 1:]]), \
                    Channel(runner, path, names)
    return script, None


async def package_scripts(sandbox: "Sandbox", script: str) -> dict[str, str]:
    """The `scripts` of the workdir's package.json when a line of `script` runs a package script; read
    before the patch is applied (the base's), {} otherwise."""
    if not any(_PACKAGE_SCRIPT.match(line) for line in script.split("\n")):
        return {}
    try:
        data = json.loads(await sandbox.download(f"{sandbox.workdir.rstrip('/')}/package.json"))
    except Exception:  # noqa: BLE001 - no package.json, or not JSON: no script to read
        return {}
    scripts = data.get("scripts") if isinstance(data, dict) else None
    return scripts if isinstance(scripts, dict) else {}


def _canaries(runner: Runner, test_files: list[str] | tuple[str, ...]) \
        -> tuple[list[str], list[str], tuple[tuple[str, str], ...]]:
    """(shell lines appending a canary to each test file of the runner's that exists, shell lines
    cutting each back to its size before the canary once the test command is done, each canary's
    name and file). The cut keeps every other byte as the run left it: the test files are verified
    after the run (grading.build_phase), and a change the code under test made still shows."""
    appends, restores, names = [], [], []
    for i, f in enumerate(test_files):
        if runner.test_file.search(f):
            name, n = f"{secrets.token_hex(4)} {secrets.token_hex(4)}", secrets.randbelow(1 << 30)
            size, q = f"SANDBATCH_CANARY_SIZE_{i}", shlex.quote(f)
            appends.append(f"[ -f {q} ] && {size}=$(stat -c %s {q}) && "
                           f"printf '\\n%s\\n' {shlex.quote(runner.canary(name, n))} >> {q}")
            restores.append(f'[ -n "${{{size}:-}}" ] && truncate -s "${size}" {q}')
            names.append((name, f))
    return appends, restores, tuple(names)


async def reconcile(sandbox: "Sandbox", channel: Channel | None, status: dict[str, str]) -> Findings:
    """Every test `status` (the log parser's) has passed that the runner's report does not confirm as
    passed, counted failed, each with a `tampering` entry."""
    if channel is None:
        return Findings()
    try:
        report: dict[str, str] | None = channel.runner.read(
            (await sandbox.download(channel.path)).decode("utf-8", "replace"))
    except Exception:  # noqa: BLE001 - no report, or not the runner's: nothing it confirms
        report = None
    out, entries, log = dict(status), [], []
    # a canary the report has passed or lacks: its assertions held whatever they asserted
    ran = (report or {}).get(FILES, "").split("\n")
    vacuous = [c for c, f in channel.canaries if report is not None and report.get(c) != "FAILED"
               and any(r == f or r.endswith(f"/{f}") for r in ran)]  # its file ran, and it did not fail
    for name, st in status.items():
        if name in {c for c, _ in channel.canaries} or st != "PASSED":
            continue
        if (report or {}).get(name) != "PASSED":
            out[name] = "FAILED"
            entries.append({"path": name, "kind": KIND, "action": "counted_failed"})
            said = "is missing" if report is None else f"has it {(report.get(name) or 'not at all').lower()}"
            log.append(f"{channel.runner.name}: the log says {name!r} passed; its own report {said}")
        elif vacuous:
            out[name] = "FAILED"
            entries.append({"path": name, "kind": CANARY, "action": "counted_failed"})
            log.append(f"{channel.runner.name}: the log says {name!r} passed; so did the test {vacuous[0]!r} "
                       "added to fail (an assertion that cannot hold): this run's assertions are not trustworthy")
    return Findings(entries=tuple(entries), failed=failed_since(status, out), log=tuple(log))
