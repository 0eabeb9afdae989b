"""Go's decisive outcomes confirmed outside the test process.

`go test` links the code under test into the test binary: a package's `init()` runs before any
test and can print `--- PASS` lines and `os.Exit(0)`; `go test -json` comes from that same
process. What that process cannot forge is how another process of the same binary ends. So,
after the row's own test command (its log still gives the other tests' statuses), the eval
script, as root:

- builds each package of the command into a test binary of its own (`go test -c`, the
  command's build flags), with a canary test the grader adds for the build alone: a test
  function of a random name whose body fails (`t.Fatal`), in the package's external test
  package; the file is removed once built;
- makes the package's `*_test.go` files unreadable to anyone but root for the runs (the code
  under test cannot read which tests exist, so it cannot tell a decisive test from the canary);
- runs the canary, then every decisive test the log read as passed, each in a process of its
  own (`-test.run '^Name$'`), as the test user where the sandbox can make one, and records each
  process's exit status in a file of root's (the status is the shell's, not the process's word).

A decisive test is confirmed passed when its own process exited 0 and the canary of its binary
failed. A canary that exits 0 means the binary ends 0 whatever its tests do (an `init()` that
exits early, a patched `testing`): every decisive pass of that package counts failed, with a
`tampering` entry `canary_passed`. A decisive test whose process failed, or that no package of
the command declares, or whose binary did not build, counts failed with `outcome_unconfirmed`.
docs/benchmarks.md ("Other runners") says what this leaves open.
"""

from __future__ import annotations

import re
import secrets
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .result import Findings, failed_since
from .verdict import UID_BASE, UID_SPAN, as_user, kill_all

if TYPE_CHECKING:
    from ..sandbox import Sandbox

CANARY, UNCONFIRMED = "canary_passed", "outcome_unconfirmed"
_GO_TEST = re.compile(r"^\s*(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*go\s+test(?:\s|$)")
# flags of `go test` that take their value as the next argument (the others are booleans or -flag=value)
_VALUED = {"run", "skip", "timeout", "count", "tags", "p", "parallel", "cpu", "bench", "benchtime", "coverprofile",
           "covermode", "coverpkg", "o", "exec", "mod", "modfile", "ldflags", "gcflags", "asmflags", "blockprofile",
           "cpuprofile", "memprofile", "mutexprofile", "outputdir", "trace", "shuffle", "fuzz", "fuzztime",
           "fuzzminimizetime", "list", "C", "overlay", "pkgdir", "toolexec", "vet", "memprofilerate",
           "blockprofilerate", "mutexprofilefraction", "installsuffix", "compiler", "buildmode", "gccgoflags",
           "pgo"}
# build flags of the command the confirming binaries are built with too
_BUILD = {"tags", "mod", "modfile", "ldflags", "gcflags", "asmflags", "race", "msan", "asan", "trimpath", "overlay",
          "pgo", "cover", "covermode", "coverpkg"}


@dataclass
class Check:
    dir: str  # root's, in the sandbox's scratch directory
    canary: str  # the canary test's name, new for every grade
    tests: list[str] = field(default_factory=list)  # the decisive tests to confirm


def _command(line: str) -> tuple[list[str], list[str]] | None:
    """(packages, build flags) of a `go test` line; None when the line does not run `go test`."""
    if not _GO_TEST.match(line):
        return None
    try:
        words = shlex.split(re.split(r"\s(?:\||&&|\|\||;)\s", line, maxsplit=1)[0])
    except ValueError:
        return None
    words = words[words.index("test", words.index("go")) + 1:]
    packages: list[str] = []
    build: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("-args", "--args"):
            break
        if not w.startswith("-"):
            packages.append(w)
        else:
            name, has_value = w.lstrip("-").split("=", 1)[0], "=" in w
            took = [w] if has_value or name not in _VALUED else words[i:i + 2]
            build += took if name in _BUILD else []
            i += len(took) - 1
        i += 1
    return packages or ["."], build


def _run_pattern(test: str) -> str:
    """The -test.run pattern of one test or subtest (`TestX/case_1`): each level anchored."""
    return "/".join(f"^{re.escape(part)}$" for part in test.split("/"))


def instrument(script: str, end: str, exit_var: str, scratch: str, decisive: set[str],
               users: bool) -> tuple[str, Check | None]:
    """The eval script with the confirmation right after the row's test command (after the end
    marker's line and the echo of the command's status, before the test files are reset), and the
    check to read after the run; (script, None) when the test command runs no `go test`."""
    lines = script.split("\n")
    try:
        at = next(i for i, ln in enumerate(lines) if end in ln and ":" in ln)
    except StopIteration:
        return script, None
    found = [c for ln in lines[:at] if (c := _command(ln)) is not None]
    if not found or not decisive:
        return script, None
    packages, build = found[-1]
    check = Check(dir=f"{scratch.rstrip('/')}/.g{secrets.token_hex(12)}", canary=f"Test{secrets.token_hex(6).upper()}",
                  tests=sorted(decisive))
    after = at + 1 if at + 1 < len(lines) and exit_var in lines[at + 1] else at
    block = _block(check, packages, build, UID_BASE + secrets.randbelow(UID_SPAN), users)
    return "\n".join([*lines[:after + 1], block, *lines[after + 1:]]), check


def _block(check: Check, packages: list[str], build: list[str], uid: int, users: bool) -> str:
    d, q = shlex.quote(check.dir), shlex.quote
    become = as_user(uid)
    flags = " ".join(q(f) for f in build)
    # the binary without DWARF (a link a third cheaper: 1.1 s of CPU against 1.5 on gin's row), unless the
    # command sets its own linker flags (debug info is for debuggers; a test reading its own binary's DWARF
    # would count failed, unconfirmed: none of the corpus does)
    link = flags if any(f.lstrip("-").startswith("ldflags") for f in build) else f"{flags} -ldflags=-w".strip()
    # in the package's external test package: the package compiled with its own test files is the one the
    # row's run built (cached), only the small external package and the link are new
    canary_src = (f'package %s_test\\n\\nimport "testing"\\n\\nfunc {check.canary}(t *testing.T) '
                  '{ t.Fatal("this test must fail") }\\n')
    # one process per test: its exit status, as root's shell saw it, into root's status file
    one = ('sbg_one() { (cd "$sbg_dir" && sbg_as "$sbg_bin" -test.run "$3" -test.count=1 -test.v '
           '< /dev/null >> "$sbg_d/$sbg_n.log" 2>&1); echo "$1 $sbg_n $? $2" >> "$sbg_d/status"; }')
    # a test belongs to the package whose test files declare its top-level function
    runs = [f'  grep -qsE {q("^func " + re.escape(t.split("/")[0]) + "[(]")} "$sbg_dir"/*_test.go && '
            f"sbg_one test {q(t)} {q(_run_pattern(t))}" for t in check.tests]
    declares = q("^func (" + "|".join(sorted({re.escape(t.split("/")[0]) for t in check.tests})) + ")[(]")
    return "\n".join([
        "{ set +x; } 2>/dev/null",
        f"sbg_d={d}; rm -rf \"$sbg_d\"; mkdir -m 711 \"$sbg_d\" && : > \"$sbg_d/status\" && chmod 600 \"$sbg_d/status\"",
        'sbg_as() { "$@"; }',
        f'if {"true" if users else "false"} && [ "$(id -u)" = 0 ] && {become} true 2>/dev/null; then',
        f'  mkdir -m 700 "$sbg_d/home" && chown {uid}:{uid} "$sbg_d/home"',
        f'  sbg_as() {{ {become} env HOME="$sbg_d/home" "$@"; }}; echo separated > "$sbg_d/isolation"',
        "fi",
        one,
        "sbg_n=0",
        "while read -r sbg_name sbg_dir; do",
        f'  sbg_n=$((sbg_n + 1)); sbg_bin="$sbg_d/$sbg_n.test"; sbg_c="$sbg_dir/zz_sb{check.canary}_test.go"',
        # a package none of whose test files declares a decisive test gets no binary (`./...` names many)
        f'  grep -qsE {declares} "$sbg_dir"/*_test.go || continue',
        f"  printf '{canary_src}' \"$sbg_name\" > \"$sbg_c\"",
        f'  (cd "$sbg_dir" && go test -c -o "$sbg_bin" {link} . < /dev/null) > "$sbg_d/$sbg_n.build" 2>&1; rm -f "$sbg_c"',
        '  [ -x "$sbg_bin" ] || continue',
        '  chmod 711 "$sbg_bin"',
        # the package's test sources unreadable to the test process: which tests exist is not its to read
        '  sbg_modes=$(cd "$sbg_dir" && stat -c "%a %n" -- *_test.go 2>/dev/null)',
        '  (cd "$sbg_dir" && chmod go-rwx -- *_test.go 2>/dev/null)',
        f"  sbg_one canary {check.canary} {q(_run_pattern(check.canary))}",
        *runs,
        '  printf "%s\\n" "$sbg_modes" | while read -r sbg_m sbg_f; do [ -n "$sbg_f" ] && chmod "$sbg_m" "$sbg_dir/$sbg_f"; done',
        f'done < <(go list -f "{{{{.Name}}}} {{{{.Dir}}}}" {flags} {" ".join(q(p) for p in packages)} 2>"$sbg_d/list.err")',
        # what the test user left running is stopped before the test files go back
        f'[ -s "$sbg_d/isolation" ] && {kill_all(uid)}',
        "set -x",
    ])


async def confirm(sandbox: "Sandbox", check: Check | None, status: dict[str, str]) -> Findings:
    """Every decisive test `status` has passed that its own process did not confirm, counted failed,
    each with a `tampering` entry."""
    if check is None:
        return Findings()
    try:
        text = (await sandbox.download(f"{check.dir}/status")).decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - nothing recorded: nothing is confirmed
        text = ""
    canary_rc: dict[str, int] = {}
    passed: dict[str, str] = {}  # test -> the binary whose process exited 0 for it
    ran: set[str] = set()
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        parts = rest.split(" ", 2)
        if len(parts) < 3:
            continue
        n, rc, name = parts
        if kind == "canary":
            canary_rc[n] = int(rc)
        elif kind == "test":
            ran.add(name)
            if rc == "0":
                passed.setdefault(name, n)
    out, confirmed, entries, log = dict(status), 0, [], []
    for name in check.tests:
        if status.get(name) != "PASSED":
            continue
        n = passed.get(name)
        if n is not None and canary_rc.get(n, 0) != 0:
            confirmed += 1  # its own process passed, and its binary fails a failing test
            continue
        if n is not None:
            kind, said = CANARY, "its binary also passed a test that must fail: the binary ends 0 whatever its tests do"
        else:
            kind = UNCONFIRMED
            said = ("its own process failed" if name in ran else
                    "no package of the command declares it, or its test binary did not build")
        out[name] = "FAILED"
        entries.append({"path": name, "kind": kind, "action": "counted_failed", "detail": said})
        log.append(f"go test: the log says {name!r} passed; {said}")
    try:
        separated = (await sandbox.download(f"{check.dir}/isolation")).strip() == b"separated"
    except Exception:  # noqa: BLE001 - no file: no test user could be made
        separated = False
    log.append(f"go test: {confirmed} decisive tests confirmed, each by a process of its own, "
               f"{'as a test user of its own' if separated else 'as the grading exec user (no test user here)'}")
    return Findings(entries=tuple(entries), failed=failed_since(status, out), log=tuple(log))
