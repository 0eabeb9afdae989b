"""googletest outcomes confirmed outside the test process, for rows whose tests ctest runs.

googletest reports from inside the process of the code under test: a header the patch adds
can print `[       OK ] suite.test` for a test that just failed from an exit hook (a static
object's destructor, an `atexit` handler) and end the process with `_exit(0)`; the log, and
ctest's own accounting of the binary's exit status, then agree on a pass. What the code under
test cannot reach is the status a process it did not start ends with, read by the sandbox's
exec (not printed): after the eval script, the grader asks ctest (not the test binary) for
its tests' commands (`--show-only=json-v1`) and runs

- each decisive test the log read as passed, alone and with `--gtest_break_on_failure`:
  `<command> --gtest_filter=<test> --gtest_break_on_failure`, one exec each, its exit status
  read from the exec. googletest then ends the process with a trap at the first failed
  assertion, inside its own assertion code, before control returns to anything the code under
  test registered for the exit; a status other than 0 counts the test failed
  (`exit_status_contradicts`; `outcome_unconfirmed` when the same run without the flag ends
  with 0: an exit hook's status, or a test that checks googletest's own failure reports
  through gtest-spi.h, which traps too: neither confirms a pass);
- each command once with googletest's shard variables out of range
  (`GTEST_TOTAL_SHARDS=1 GTEST_SHARD_INDEX=1`): googletest calls `exit(1)` before any test
  runs, so a 0 is an exit hook rewriting the status, and no exit status of that binary
  confirms anything: every test it holds counts failed (`exit_status_forged`).

A test no command could be asked about (ctest lists nothing, the listing fails) counts failed
too (`outcome_unconfirmed`). Not confirmable this way: code under test that catches
the trap's signal itself and ends the process with 0 (the process is googletest's and the
code under test's alike); docs/benchmarks.md ("Other runners") says so.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import TYPE_CHECKING

from .result import Findings, failed_since

if TYPE_CHECKING:
    from ..sandbox import Sandbox

PARSER = "parse_log_googletest"
CONTRADICTS, FORGED, UNCONFIRMED = "exit_status_contradicts", "exit_status_forged", "outcome_unconfirmed"
# out-of-range shard variables: googletest prints "Invalid environment variables" and exits 1
CANARY_ENV = {"GTEST_TOTAL_SHARDS": "1", "GTEST_SHARD_INDEX": "1"}
_CTEST = re.compile(r"^\s*(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*ctest(?:\s|$)")
_VERBOSE = re.compile(r"\s(?:-VV?|--verbose|--extra-verbose|--output-on-failure)(?=\s|$)")


def ctest_line(test_command: str) -> str | None:
    """The test command's ctest invocation (the first line starting it), None when there is none."""
    return next((ln.strip() for ln in test_command.split("\n") if _CTEST.match(ln)), None)


def applies(parser_name: str, test_command: str) -> bool:
    return parser_name == PARSER and ctest_line(test_command) is not None


def commands(listing: str) -> list[tuple[list[str], str | None]]:
    """(argv, working directory) of each test in ctest's `--show-only=json-v1` listing (the JSON
    document is the output's last part: ctest may print configuration lines before it)."""
    doc = json.loads(listing[listing.index("{"):])
    out = []
    for test in doc.get("tests") or []:
        argv = [str(a) for a in test.get("command") or []]
        wd = next((p.get("value") for p in test.get("properties") or [] if p.get("name") == "WORKING_DIRECTORY"), None)
        if argv:
            out.append((argv, wd))
    return out


def _entry(path: str, kind: str, detail: str) -> dict[str, str]:
    return {"path": path, "kind": kind, "action": "counted_failed", "detail": detail}


async def confirm(sandbox: "Sandbox", test_command: str, status: dict[str, str], decisive: set[str],
                  timeout: float) -> Findings:
    """Every decisive test `status` has passed that its own process did not confirm, counted failed,
    each with a `tampering` entry."""
    claimed = sorted(t for t in decisive if status.get(t) == "PASSED")
    if not claimed:
        return Findings()
    out, entries, log = dict(status), [], []

    def fail(test: str, kind: str, detail: str) -> None:
        out[test] = "FAILED"
        entries.append(_entry(test, kind, detail))
        log.append(f"googletest: {test}: {detail}")

    def found() -> Findings:
        return Findings(entries=tuple(entries), failed=failed_since(status, out), log=tuple(log))

    line = _VERBOSE.sub("", ctest_line(test_command) or "")
    listed = await sandbox.exec(f"{line} --show-only=json-v1", cwd=sandbox.workdir, timeout=min(timeout, 300),
                                lost="rerun")
    try:
        cmds = commands(listed.stdout) if listed.ok else []
    except (ValueError, AttributeError):
        cmds = []
    if not cmds:
        for t in claimed:
            fail(t, UNCONFIRMED, f"ctest listed no test command to run it by ({line!r} exited {listed.exit_code})")
        return found()
    per_test = min(timeout, 600)
    # which command holds which test: with one command, every test; with several, each one's own
    # listing (printed by the binary: a wrong answer only sends a test where it fails or does not run)
    holders: dict[str, list[tuple[list[str], str | None]]] = {t: [] for t in claimed}
    for argv, wd in cmds:
        names = set(claimed)
        if len(cmds) > 1:
            res = await sandbox.exec([*argv, "--gtest_list_tests"], cwd=wd or sandbox.workdir, timeout=per_test,
                                     lost="rerun")
            names = _listed(res.stdout) & names
        for t in names:
            holders[t].append((argv, wd))
    for argv, wd in cmds:
        canary = await sandbox.exec([*argv], cwd=wd or sandbox.workdir, env=CANARY_ENV, timeout=per_test)
        if canary.exit_code == 0 and not canary.timed_out:
            for t, held in holders.items():
                if (argv, wd) in held and out.get(t) == "PASSED":
                    fail(t, FORGED, f"{argv[0]} exited 0 where googletest must exit 1 (shard index out of "
                                    f"range): its exit status is not googletest's, so none of it confirms a test")
    for t, held in holders.items():
        if out.get(t) != "PASSED":
            continue
        if not held:
            fail(t, UNCONFIRMED, "no test binary ctest lists holds it")
            continue
        for argv, wd in held:
            alone = [*argv, f"--gtest_filter={t}", "--gtest_break_on_failure"]
            res = await sandbox.exec(alone, cwd=wd or sandbox.workdir, timeout=per_test)
            if res.exit_code == 0 and not res.timed_out:
                continue
            ended = "timed out" if res.timed_out else f"exited {res.exit_code}"
            # a test may itself check googletest's failure reports (gtest-spi.h's EXPECT_FATAL_FAILURE),
            # which trap too: without the flag, a 0 is that test passing or an exit hook, never a confirmation
            plain = None if res.timed_out else await sandbox.exec(alone[:-1], cwd=wd or sandbox.workdir,
                                                                  timeout=per_test)
            if plain is not None and plain.exit_code == 0 and not plain.timed_out:
                fail(t, UNCONFIRMED, f"run alone with --gtest_break_on_failure its process {ended}, without it "
                                     f"0: a failure googletest intercepted (gtest-spi) or an exit hook's status")
            else:
                fail(t, CONTRADICTS, f"the log says it passed; run alone ({shlex.join(alone)}) its process {ended}")
            break
    confirmed = sum(out.get(t) == "PASSED" for t in claimed)
    log.append(f"googletest: {confirmed} of the {len(claimed)} decisive tests the log read as passed confirmed "
               f"by their own processes ({len(cmds)} test binary(ies), each refusing the shard canary)")
    return found()


def _listed(text: str) -> set[str]:
    """Test names from `--gtest_list_tests` (suites flush left ending in '.', tests indented)."""
    names, suite = set(), ""
    for raw in text.split("\n"):
        ln = raw.split("#", 1)[0].rstrip()
        if ln and not ln[0].isspace():
            suite = ln.strip()
        elif ln.strip() and suite:
            names.add(f"{suite}{ln.strip()}")
    return names
