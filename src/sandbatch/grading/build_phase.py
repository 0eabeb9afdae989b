"""The eval script's build phase as attack surface (docs/benchmarks.md, "Code that runs before the
tests"): what an eval script builds or installs after the restore (a `pip install -e .`, cmake,
`npm run build`) runs the patch's code before the tests.

With the defences on, the grader
- places the tests first: the script's own reset of the test files and its application of the
  test patch move ahead of everything but its setup lines (place_first), so that the build runs
  with the tests already placed;
- runs the build as the test user where the tests run as one (as_test_user, called from
  swebench.with_channel): the test files and the grader's files are root's and read-only to it,
  the interpreter's site and scripts directories are its for the build alone, and every process
  it left is killed after it;
- records, in the script's own shell, right after the placement (before the build), right before
  the test command (after the build) and right after it (after the run), the sha256 of every file
  it protects (the task's test files, the test files and runner configuration the restore put
  back, the conftest.py files above the test files: present or absent, and the grader's own
  files), and, before and after the build, what the test command's interpreter runs at start-up
  (startup_probe.py, which runs none of it): the records go into the channel's directory and are
  read back with its verdict (where nothing but setup lines comes between the placement and the
  test command, the record before the build is left out: it would hold what the next one holds);
- judges them here: a protected file that changed is kind `tests_rewritten` (its tests count as
  failed), start-up code that is new or changed after the build (a `.pth`, `sitecustomize` or
  `usercustomize` in any form, a module a `.pth` imports, a pytest11 entry point and the module
  it names, wherever on the path) is kind `startup_hook`; either way the rollout is not resolved.
  Start-up code the build rewrote byte for byte as it was (an editable install's finder) is the
  image's.
"""
from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath

from . import in_sandbox, tamper
from .verdict import FD, entry, kill_all

PROBE_SOURCE = in_sandbox.HERE / "startup_probe.py"
PROBE = "_sbv_startup.py"
POINTS = ("placed", "built", "ran")  # when the protected files are hashed
PROBED = ("placed", "built")  # when what runs at start-up is listed
RECORD = "sandbatch-record"  # the comment that bounds each record's lines
PLACED = ": sandbatch-tests-placed"  # the placement block's bounds, once moved
SECTIONS = tuple(f"files.{p}" for p in POINTS) + tuple(f"startup.{p}" for p in PROBED)
_APPLY = re.compile(r"^git apply\b.*<<-?\s*'?([A-Za-z0-9_]+)'?")
# the lines an eval script starts with that run nothing of the workdir: its environment's activation,
# exports, directory changes and git's informational commands; the tests are placed after them, so
# that the records after the placement see the interpreter the test command will
_SETUP = re.compile(r"^(#|set |source |\. |conda activate |cd |export |git (config|status|show|-c core\.fileMode=false diff)\b)")


def _placement(lines: list[str], test_patch: str) -> tuple[int, int] | None:
    """[start, end) of the lines that place the tests: the `git apply` heredoc carrying the test patch
    and the `git checkout` resets right before it."""
    want = test_patch.strip()
    for i, line in enumerate(lines):
        m = _APPLY.match(line)
        if not m or not want:
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j] == m.group(1)), None)
        if end is None or "\n".join(lines[i + 1:end]).strip() != want:
            continue
        start = i
        while start > 0 and lines[start - 1].startswith("git checkout "):
            start -= 1
        return start, end + 1
    return None


def place_first(script: str, test_patch: str, workdir: str) -> tuple[str, bool]:
    """(the script with the tests placed at its top, whether the placement was found and moved)."""
    lines = script.split("\n")
    found = _placement(lines, test_patch)
    if found is None:
        return script, False
    start, end = found
    head = 0
    while head < start and _SETUP.match(lines[head]):
        head += 1
    block = [f"cd {shlex.quote(workdir)}", PLACED, *lines[start:end], PLACED]
    return "\n".join([*lines[:head], *block, *lines[head:start], *lines[end:]]), True


def uploads(directory: str) -> dict[str, tuple[bytes, int]]:
    """The start-up probe, uploaded into the channel's directory with the grade's other files."""
    return {f"{directory}/{PROBE}": (PROBE_SOURCE.read_bytes(), 0o644)}


def restorable(patch: str, test_files: frozenset[str]) -> list[str]:
    """The test files and runner configuration the patch touched (the restore put them back or removed
    them): what the build must leave as the restore left it. Compiled code and installed metadata it
    restores too are the build's to write."""
    return [p for p in tamper.touched_paths(patch) if tamper.classify(p, test_files) in ("test_file", "runner_config")
            or PurePosixPath(p).name == "conftest.py"]


def protected(test_files: list[str], restored: list[str], grader: list[str]) -> list[str]:
    """What is hashed: the task's test files, what the restore acted on, the conftest.py files above
    each test file (present or absent), the grader's own files (absolute paths)."""
    near = {str(PurePosixPath(*PurePosixPath(f).parts[:i], "conftest.py"))
            for f in test_files for i in range(len(PurePosixPath(f).parts))}
    return list(dict.fromkeys([*test_files, *restored, *sorted(near), *grader]))


def record(directory: str, point: str, files: list[str], workdir: str) -> str:
    """Shell, run in the eval script's shell, that records the protected files' hashes at `point` (and,
    where the point is probed, what its interpreter runs at start-up) into `directory`, silently."""
    d = shlex.quote(directory)
    out = f"{d}/files.{point}"
    listed = " ".join(shlex.quote(f) for f in files)
    lines = [
        f"{{ set +x; }} 2>/dev/null  # {RECORD} {point}",
        # (one sha256sum for every file present: a process a file was most of a record's cost)
        f"( cd {shlex.quote(workdir)} && sbb_h=(); for sbb_f in {listed}; do if [ -e \"$sbb_f\" ]; then "
        f'sbb_h+=("$sbb_f"); else echo "absent  $sbb_f"; fi; done; [ ${{#sbb_h[@]}} = 0 ] || sha256sum -- "${{sbb_h[@]}}" ) '
        f"> {out} 2>/dev/null; chmod 600 {out}",
    ]
    if point in PROBED:
        probe = f"{d}/startup.{point}"
        lines.append(f'sbb_py=$(command -v python || command -v python3); if [ -n "$sbb_py" ]; then '
                     f'"$sbb_py" -I -S {d}/{PROBE} "${{HOME:-/root}}" "${{PYTHONPATH:-}}" > {probe} 2>/dev/null; '
                     f"chmod 600 {probe}; fi")
    lines.append(f"set -x  # {RECORD} {point}")
    return "\n".join(lines)


def instrument(script: str, directory: str, files: list[str], workdir: str, start: str, end: str) -> str:
    """The records placed: right after the placement at the script's top (where something other than
    setup lines follows it), right before the start marker, right after the test command's status is
    echoed (before the script resets the tests)."""
    lines = script.split("\n")
    at = next((i for i, ln in enumerate(lines) if start in ln), None)
    stop = next((i for i, ln in enumerate(lines) if end in ln and at is not None and i > at), None)
    if at is None or stop is None:
        return script
    after = stop + 1 if stop + 1 < len(lines) and lines[stop + 1].startswith("echo ") else stop
    placed = _after_placement(lines)
    # where only setup lines come between the placement and the test command, nothing can change what the
    # records hold between the two: the one before the test command is the only baseline (a record less:
    # a probe's interpreter and a hash of every protected file)
    builds = any(ln.strip() and not _SETUP.match(ln) for ln in lines[placed:at])
    return "\n".join([*lines[:placed], *([record(directory, "placed", files, workdir)] if builds else []),
                      *lines[placed:at], record(directory, "built", files, workdir), *lines[at:after + 1],
                      record(directory, "ran", files, workdir), *lines[after + 1:]])


def _after_placement(lines: list[str]) -> int:
    """The line after the placement block place_first moved, or after the script's header."""
    marks = [i for i, ln in enumerate(lines) if ln == PLACED]
    if len(marks) >= 2:
        return marks[1] + 1
    return 2 if lines[:2] == ["#!/bin/bash", "set -uxo pipefail"] else 0


def _hashes(lines: list[str]) -> dict[str, str]:
    out = {}
    for line in lines:
        digest, _, path = line.partition("  ")
        if path:
            out[path.lstrip("*")] = digest
    return out


def _startup(lines: list[str]) -> dict[str, str]:
    out = {}
    for line in lines:
        parts = line.split(" ", 2)
        if len(parts) == 3:
            out[parts[2]] = f"{parts[0]} {parts[1]}"
    return out


def summary(records: dict[str, list[str]], placed_first: bool) -> dict:
    """grade.json report.build_phase: whether the tests were placed before the build, which records came
    back, and how many files the build wrote outside the workdir as the test user (build.wrote)."""
    return {"placed_first": placed_first, "records": sorted(k for k in records if k != "build.wrote"),
            "wrote_outside_workdir": len(records["build.wrote"]) if "build.wrote" in records else None}


def judge(sections: dict[str, list[str]], status: dict[str, str], decisive: set[str],
          placed_first: bool) -> tuple[list[dict[str, str]], bool]:
    """(tampering entries, whether the rollout may still be resolved) from the records; decisive tests
    of a rewritten file the log calls passed are set to FAILED in `status`. Records missing where
    they should be (the script ended early, or they were removed) are no evidence either way: the
    verdict's own checks decide that run."""
    out: list[dict[str, str]] = []
    files = {p: _hashes(sections.get(f"files.{p}", [])) for p in POINTS}
    for before, after, when in (("placed", "built", "during the build"), ("built", "ran", "during the test run")):
        if not files[before] or not files[after]:
            continue
        if before == "placed" and not placed_first:
            continue  # the tests were placed after the top record: it is no baseline for them
        for path, digest in files[before].items():
            if files[after].get(path) != digest:
                out.append(entry(path, "tests_rewritten", "counted_failed", f"changed {when}"))
                for t in decisive:
                    if t.split("::")[0] == path and status.get(t) in ("PASSED", "XFAIL"):
                        status[t] = "FAILED"
    start = {p: _startup(sections.get(f"startup.{p}", [])) for p in PROBED}
    if sections.get("startup.placed") is not None and sections.get("startup.built") is not None:
        for path, what in sorted(start["built"].items()):
            if start["placed"].get(path) != what:
                kind = what.split(" ")[0]
                out.append(entry(path, "startup_hook", "not_resolved",
                                 f"start-up code ({kind}) written during the build"))
    return out, not out


def build_lines(lines: list[str]) -> tuple[int, int] | None:
    """[start, end) of the build: the lines between the record after the placement and the one before
    the test command (None without both records)."""
    after = next((i for i, ln in enumerate(lines) if ln.endswith(f"# {RECORD} placed") and ln.startswith("set -x")), None)
    before = next((i for i, ln in enumerate(lines) if ln.endswith(f"# {RECORD} built") and ln.startswith("{")), None)
    if after is None or before is None or before < after:
        return None
    # the script's own setup lines between them (SWE-bench's eval_commands, the environment's activation:
    # exports the test command needs, commands of the image's own) stay in the script's shell
    start = max([after + 1, *(i + 1 for i in range(after + 1, before) if _SETUP.match(lines[i]))])
    if not any(ln.strip() for ln in lines[start:before]):
        return None
    return start, before


BUILD_EOF = "EOF_SANDBATCH_BUILD_5b2e"


def as_test_user(build: list[str], directory: str, uid: int, fd: int, workdir: str) -> list[str]:
    """Shell, run as root where the channel's prologue made the test user, that runs the build lines as
    that user: the interpreter's site and scripts directories become its for the build (a reinstall
    writes there), then every process it left is killed, what it wrote outside the workdir is root's
    again (listed in build.wrote) and the directories are given back. Where no test user was made
    (`$sbv_d/modes` empty), the lines run as they are, in the script's own shell."""
    d = shlex.quote(directory)
    # (resolved and deduplicated by the same interpreter: no process more a directory)
    dirs = ("import os, site, sysconfig; p = sysconfig.get_paths(); print(chr(10).join(sorted({os.path.realpath(d) "
            "for d in [p['purelib'], p['platlib'], p['scripts']] + list(site.getsitepackages()) if os.path.isdir(d)})))")
    return [
        'if [ -s "$sbv_d/modes" ]; then',
        f"cat > {d}/build.sh <<'{BUILD_EOF}'", "set -uxo pipefail", *build, BUILD_EOF,
        f"chmod 644 {d}/build.sh",
        "{ set +x; } 2>/dev/null",
        # what a reinstall writes: the interpreter's site and scripts directories, the test user's for the
        # build alone (their files stay root's: a file it replaces is one it wrote, and is listed after)
        'sbb_py=$(command -v python || command -v python3)',
        f'sbb_dirs=$([ -n "$sbb_py" ] && "$sbb_py" -I -S -c {shlex.quote(dirs)} 2>/dev/null)',
        # the directories, and the files an install rewrites in place at their top (easy-install.pth)
        # (listed and given in the same walk: each entry is listed when visited, before its batch's chown)
        f'[ -n "$sbb_dirs" ] && {{ find $sbb_dirs -type d \\( ! -user 0 -printf "%u:%g %p\\n" , '
        f'-exec chown {uid}:{uid} {{}} + \\); find $sbb_dirs -maxdepth 1 -type f \\( ! -user 0 -printf "%u:%g %p\\n" , '
        f'-exec chown {uid}:{uid} {{}} + \\); }} > {d}/build.owners 2>/dev/null',
        # the workdir's files git does not track (the image's build output: an editable install's egg-info,
        # compiled extensions) are rewritten in place by a rebuild: the test user's too (the epilogue gives
        # back whatever of the workdir it owns). Not the bytecode: Python replaces a .pyc through a new file
        # (its directory's to allow), and each file given copies it up (360 of them in SymPy's image)
        f"git -C {shlex.quote(workdir)} ls-files -z -o -x '*.pyc' -x '*.pyo' 2>/dev/null | (cd {shlex.quote(workdir)} && "
        f"xargs -0 -r chown {uid}:{uid} -- 2>/dev/null)",
        f": > {d}/build.start",  # what the build writes changes its files after this (their ctime)
        "set -x",
        f'sbv_as_tests bash {d}/build.sh {fd}>&-',
        "{ set +x; } 2>/dev/null",
        kill_all(uid),
        # (what it wrote listed and given back in one walk: an entry's ctime is read before its batch's chown)
        f'if [ -n "$sbb_dirs" ]; then find $sbb_dirs -user {uid} \\( ! -type d -cnewer {d}/build.start -print , '
        f'-exec chown 0:0 {{}} + \\) > {d}/build.wrote 2>/dev/null; chmod 600 {d}/build.wrote; '
        f'while read -r sbb_o sbb_p; do chown "$sbb_o" "$sbb_p"; done < {d}/build.owners; fi',
        "set -x",
        "else",
        *build,
        "fi",
    ]
