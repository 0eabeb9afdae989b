"""The verdict channel: each pytest test's outcome as the runner's raw call result had it,
compared with what the log parser read (docs/benchmarks.md, "The verdict channel").

Per grade, a random directory outside the workdir gets the plugin (pytest_plugin.py) under
a random module name and the start-up tracker as its sitecustomize (startup_tracker.py: what
runs before the plugin, from the interpreter's start-up); the test command runs with
PYTEST_ADDOPTS=-p <name> and that directory on PYTHONPATH, as a user of its own (Channel.prologue), with the writing end of a pipe whose
reading end root's `cat` appends to verdict.jsonl there, a file the test user cannot open.
The plugin writes one line per setup and call of each test into it, then an end record (what
of the runner was replaced, plugins the code under test registered, pytest's rootdir, the
session's exit status); each line carries its process and its number in that process's
sequence. Here the file is read back and checked:

- a test the log calls passed (or an expected failure) whose call raised, or that has no
  verdict at all while its file is one of the task's test files or one the session
  collected, counts as failed: tampering
  kind `report_rewritten`, naming the test (a name of no file the session collected is not
  a test of this run: the log parser read it from output the tests print, such as the
  sessions pytest's own suite runs inside its tests, or `[100%]`);
- runner objects replaced during the run, plugin objects registered by workdir code, or a
  verdict with a line that is no record or breaks a process's sequence, or a process that
  ended early: `runner_patched`, the rollout is not resolved. No record at all means no
  pytest loaded the plugin (the test command ran none, or ran it where the exports do not
  reach, as tox does): there is no verdict to expect;
- a rootdir outside the workdir (a configuration above the workdir applied): an
  infrastructure error, grading_rootdir.
"""

from __future__ import annotations

import json
import base64
import binascii
import os
import re
import secrets
import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Callable

from ..core.errors import InfraError
from ..core.failures import FailureClass
from . import in_sandbox, plugin_findings
from .verdict_record import Verdict

if TYPE_CHECKING:
    from ..sandbox import Sandbox

PLUGIN_SOURCE = in_sandbox.HERE / "pytest_plugin.py"
# the channel directory's sitecustomize: what runs before the plugin, recorded from the interpreter's start-up
STARTUP_SOURCE = in_sandbox.HERE / "startup_tracker.py"
# uploaded beside every runner plugin as _sbv_<name>.py, loaded by it from its file
SIBLINGS = {"channel": in_sandbox.HERE / "channel_writer.py", "checks": in_sandbox.HERE / "run_checks.py",
            "tracker": STARTUP_SOURCE}
UID_BASE, UID_SPAN = 1 << 20, 1 << 30  # the test user's id: a random one no image or host account has
_SECTION_RE = re.compile(r"^== (verdict\.jsonl|privilege|(?:files|startup)\.[a-z]+|build\.wrote)$")
# merging the verdicts of several processes: the worst outcome of a test wins
_RANK = {"ok": 0, "skipped": 1, "xfailed": 1, "raised": 2, "error": 2}
CLAIMED = ("PASSED", "XFAIL")  # what swebench counts as passed
# what each raw outcome reads as, in a pytest log
AS_LOG = {"ok": "PASSED", "raised": "FAILED", "error": "ERROR", "skipped": "SKIPPED", "xfailed": "XFAIL"}
_ROOTDIR_RE = re.compile(r"^rootdir: (.+?)(?:, (?:configfile|inifile|testpaths|plugins): .*)?$", re.M)


def entry(path: str, kind: str, action: str, detail: str) -> dict[str, str]:
    return {"path": path, "kind": kind, "action": action, "detail": detail}


def _process(recs: list[dict]) -> Verdict:
    """One process's records, in its own order."""
    v = Verdict("incomplete", detail="the test run ended before the verdict's end record")
    for rec in recs:
        if rec.get("start"):
            if not rec.get("supported"):
                return Verdict("unsupported", detail=f"pytest {rec.get('pytest')} has no raw call to record")
        elif rec.get("end"):
            v.state, v.detail = "ok", ""
            v.changed, v.added = list(rec.get("changed") or []), list(rec.get("added") or [])
            v.rootdirs = [str(rec["rootdir"])] if rec.get("rootdir") else []
            v.asserts = [str(a) for a in rec.get("asserts") or []]
            v.files = {str(f) for f in rec.get("files") or []}
            v.exits = [rec["exit"] if type(rec.get("exit")) is int else None]
            break
        elif rec.get("w") in plugin_findings.KINDS:
            v.findings.append(rec)
        elif "t" in rec:
            test, kind = str(rec["t"]), str(rec.get("k"))
            if rec.get("xf"):
                v.expected_failures.add(test)
            if rec.get("w") == "setup":  # a new attempt (reruns) starts with its setup
                v.outcomes[test] = "ok" if kind == "ok" else ("error" if kind == "raised" else kind)
            elif v.outcomes.get(test, "ok") == "ok":  # unittest's adapter records a failure before the call returns
                v.outcomes[test] = kind
    return v


def parse(data: bytes | None) -> Verdict:
    """The verdict as the recorder appended it: every process's records, each process's in sequence (a
    line added under another process's id and number, or one that is not a record, makes no verdict);
    a test's outcome is its worst over every process."""
    if not data:
        return Verdict("missing", detail="the test run wrote no verdict")
    procs: dict[int, list[dict]] = {}
    for n, line in enumerate(data.decode("utf-8", "replace").splitlines()):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            pid, seq = rec["p"], rec["i"]
        except (ValueError, KeyError, TypeError):
            return Verdict("garbled", detail=f"line {n + 1} of the verdict is not a record")
        recs = procs.setdefault(pid, [])
        if type(seq) is not int or seq != len(recs):
            return Verdict("garbled", detail=f"line {n + 1} of the verdict breaks process {pid}'s sequence")
        recs.append(rec)
    return merge([_process(recs) for _, recs in sorted(procs.items())])


def merge(parts: list[Verdict]) -> Verdict:
    """The verdicts of every process of the command as one, each whole; a test's outcome is its worst."""
    if not parts:
        return parse(None)
    bad = [p for p in parts if p.state not in ("ok", "unsupported")]
    if bad:
        return bad[0]
    ok = [p for p in parts if p.state == "ok"]
    if not ok:
        return parts[0]
    out = Verdict("ok")
    for p in ok:
        for test, kind in p.outcomes.items():
            if _RANK.get(kind, 2) >= _RANK.get(out.outcomes.get(test, "ok"), 0) or test not in out.outcomes:
                out.outcomes[test] = kind
        out.expected_failures |= p.expected_failures
        out.changed += [c for c in p.changed if c not in out.changed]
        out.added += p.added
        out.rootdirs += p.rootdirs
        out.findings += p.findings
        out.asserts += [a for a in p.asserts if a not in out.asserts]
        out.files |= p.files
        out.exits += p.exits
    return out


def pytest_exit(v: Verdict | None) -> int | None:
    """pytest's own exit status over the command's pytest processes (0 when every one exited 0), as the
    verdict recorded it from inside each session; None without a whole verdict: a session cut short,
    or no pytest that loaded the channel, has no status of its own to compare the log with."""
    if v is None or v.state != "ok" or not v.exits or None in v.exits:
        return None
    return max(v.exits)


FD = 197  # the verdict pipe's writing end, as the test command inherits it
FD_VAR = "SBV_VERDICT_FD"  # channel_writer.py reads the descriptor's number from it
TESTS_EOF = "EOF_SANDBATCH_TESTS_3f1e"
ISOLATED = "separated"  # what the prologue writes into `privilege` when the tests run as another user


def as_user(uid: int) -> str:
    """The command prefix that runs a command as the test user `uid` (no account, no groups)."""
    return f"setpriv --reuid={uid} --regid={uid} --clear-groups"


def kill_all(uid: int) -> str:
    """Shell that kills every process of the test user `uid` from one shell of that user, twice over, for
    what forked during the first round (kill(-1) spares its caller, so one shell does both rounds)."""
    return f"{as_user(uid)} bash -c 'kill -9 -1; kill -9 -1' 2>/dev/null"


def _ancestors(path: str) -> list[str]:
    p = PurePosixPath(path)
    return [str(a) for a in reversed(p.parents)][1:] + [str(p)]  # without "/"


@dataclass
class Channel:
    dir: str
    module: str
    uid: int  # the unprivileged user the test command runs as: new for every grade
    test_files: list[str] = field(default_factory=list)  # the task's test files: their sha256 before the run
    # the line of the exec's output that carries the placed test files (declared.py), new for every grade
    placed_marker: str = field(default_factory=lambda: f"SANDBATCH_PLACED_{secrets.token_hex(8)}=")

    @classmethod
    def new(cls, tmpdir: str, test_files: list[str] | None = None) -> "Channel":
        return cls(dir=f"{tmpdir.rstrip('/')}/.v{secrets.token_hex(12)}", module=f"sbv_{secrets.token_hex(8)}",
                   uid=UID_BASE + secrets.randbelow(UID_SPAN), test_files=list(test_files or []))

    def plugin(self) -> tuple[str, bytes]:
        """(file name, source) of the runner plugin in the channel's directory."""
        return f"{self.module}.py", PLUGIN_SOURCE.read_bytes()

    def files(self, workdir: str) -> dict[str, bytes]:
        """What goes into the channel's directory: the start-up module, the plugin, its siblings, conf.json."""
        name, source = self.plugin()
        return {"sitecustomize.py": STARTUP_SOURCE.read_bytes(), name: source,  # (unittest's plugin: its sitecustomize)
                **{f"_sbv_{sib}.py": path.read_bytes() for sib, path in SIBLINGS.items()},
                "conf.json": plugin_findings.conf(workdir)}

    def uploads(self, sandbox: Sandbox) -> dict[str, tuple[bytes, int]]:
        """The channel's files, to be uploaded in one go with the grade's others: readable by the test
        user (nothing in them is secret), writable by their owner alone."""
        return {f"{self.dir}/{name}": (data, 0o644) for name, data in self.files(sandbox.workdir).items()}

    async def install(self, sandbox: Sandbox) -> None:
        await sandbox.upload_files(self.uploads(sandbox))

    def exports(self) -> str:
        """Shell lines that load the plugin into every pytest the test command starts."""
        return (f"{self.manifest()}\n{self.pythonpath()}\n"
                f'export PYTEST_ADDOPTS="{self.addopts()} ${{PYTEST_ADDOPTS:-}}"')

    def addopts(self) -> str:
        """What PYTEST_ADDOPTS gets: the plugin, loaded by its module name."""
        return f"-p {self.module}"

    def pythonpath(self) -> str:
        return f'export PYTHONPATH={shlex.quote(self.dir)}"${{PYTHONPATH:+:$PYTHONPATH}}"'

    def manifest(self) -> str:
        """The task's test files as placed (test_patch applied), hashed before the test command runs, and
        printed with the conftest files above them on one line of the exec's output (placed_from): what
        declares their outcomes (declared.py) is read from them on the host."""
        py = [f for f in self.test_files if f.endswith(".py")]
        if not py:
            return "true"
        files = " ".join(shlex.quote(f) for f in py)
        near = sorted({str(PurePosixPath(*PurePosixPath(f).parts[:i], "conftest.py"))
                       for f in py for i in range(len(PurePosixPath(f).parts))})
        listed = " ".join(shlex.quote(f) for f in [*py, *near])
        return (f"sha256sum -- {files} > {shlex.quote(self.dir)}/manifest 2>/dev/null; "
                f"{{ printf '\n%s' {shlex.quote(self.placed_marker)}; for f in {listed}; do "
                f'[ -f "$f" ] && echo "$f"; done | tar -cf - -T - 2>/dev/null | base64 -w0; echo; }} 2>/dev/null; true')

    def prologue(self, workdir: str, tests: list[str] | None = None, users: bool = True) -> str:
        """Shell run as root right before the test command: the recorder (`cat` draining the verdict pipe
        into a file of the channel's directory only root can open) and the pipe's writing end as
        descriptor FD; then, where the exec runs as root and setpriv can switch users, the test user
        (uid, no account: nothing of the image's is its): the workdir's directories become its, except
        those above the task's test files (root's, sticky: it can add files there but not move or
        remove root's); the test files are root's and read-only to it; the directories above the workdir and the
        channel get o+x. What it changes is recorded first and put back by the epilogue.
        `sbv_as_tests CMD...` then runs CMD as that user (as the exec's own user where none could be
        made, `privilege` then says why). tests: the test command's lines, written as tests.sh. users:
        the sandbox lets grading make a test user (Sandbox.separate_users)."""
        d, u, wd = shlex.quote(self.dir), self.uid, shlex.quote(workdir)
        root = PurePosixPath(workdir)
        py = [f for f in self.test_files if not PurePosixPath(f).is_absolute()]
        guarded = sorted({str(root.joinpath(*PurePosixPath(f).parts[:i]))
                          for f in py for i in range(len(PurePosixPath(f).parts))})
        opened = sorted({*_ancestors(str(root.parent)), *_ancestors(str(PurePosixPath(self.dir).parent))})
        q = lambda xs: " ".join(shlex.quote(x) for x in xs)  # noqa: E731
        no_user = shlex.quote("" if users else "the sandbox's files and interpreters are the host's (local provider)")
        lines = [
            f"sbv_d={d}; sbv_rec=; sbv_owner=",
            'sbv_as_tests() { "$@"; }',
            'rm -f "$sbv_d/pipe" "$sbv_d/verdict.jsonl" "$sbv_d/privilege" "$sbv_d/modes"',
            # the pipe: written by the test user (also by name, where a runner such as tox closes inherited
            # descriptors), read by root alone
            ': > "$sbv_d/verdict.jsonl"; chmod 600 "$sbv_d/verdict.jsonl"',
            'if mkfifo -m 622 "$sbv_d/pipe"; then cat "$sbv_d/pipe" >> "$sbv_d/verdict.jsonl" & sbv_rec=$!; fi',
            f'[ -n "$sbv_rec" ] && exec {FD}>"$sbv_d/pipe" && export {FD_VAR}={FD}',
        ]
        if tests is not None:
            lines += [f"cat > \"$sbv_d/tests.sh\" <<'{TESTS_EOF}'", "set -uxo pipefail", *tests, TESTS_EOF]
        lines += [
            f'if [ -n {no_user} ]; then echo {no_user} > "$sbv_d/privilege"; '
            f'elif [ "$(id -u)" != 0 ]; then echo "the grading exec does not run as root" > "$sbv_d/privilege"; '
            f'elif ! {as_user(u)} true 2>/dev/null; then echo "setpriv cannot switch users here" > "$sbv_d/privilege"; '
            f"else",
            # the directories above the interpreters the test command finds (an image may keep them under
            # a home only root may enter) open to the test user too
            # (each parent by the shell's own expansion: a `dirname` a level is a process a level)
            '  sbv_open=$(for b in python python3 pytest; do p=$(command -v "$b" 2>/dev/null) && '
            'p=$(readlink -f "$p") && while [ "$p" != / ]; do p=${p%/*}; p=${p:-/}; echo "$p"; done; done | sort -u)',
            f'  stat -c "%a %u:%g %n" -- {q([*opened, *guarded])} $sbv_open > "$sbv_d/modes" 2>/dev/null',
            f"  sbv_owner=$(stat -c %u:%g {wd})",
            # (only those that lack it: changing a directory's mode, even to what it is, copies it up from the
            # image's layer)
            f"  find {q(opened)} $sbv_open -maxdepth 0 ! -perm -0001 -exec chmod o+x {{}} + 2>/dev/null",
            '  mkdir -p "$sbv_d/home" && { cp -a "${HOME:-/root}/.gitconfig" "$sbv_d/home/" 2>/dev/null; true; }',
            # the workdir's directories become the test user's (it adds files where it likes); its files
            # stay as the image has them (readable): changing every file's owner copies each up from the
            # image's layer, a minute on Django's repository. A directory anyone may write (and not sticky)
            # is left as it is: the test user can already do there what it could as the owner (add, remove
            # and rename entries), and changing its owner would cost the copy-up for nothing (SWE-bench's
            # images make the whole repository 777: 2,964 of Django's 2,966 directories)
            f'  chown -R {u}:{u} "$sbv_d/home"; find {wd} -type d \\( ! -perm -0002 -o -perm -1000 \\) '
            f"-exec chown {u}:{u} {{}} +",
            f'  sbv_f=(); for f in {q(py)}; do [ -e "$f" ] && sbv_f+=("$f"); done',
            '  [ ${#sbv_f[@]} = 0 ] || { chown 0:0 -- "${sbv_f[@]}" && chmod go-w -- "${sbv_f[@]}"; }',
            f"  chown 0:0 -- {q(guarded)} 2>/dev/null; chmod 1777 -- {q(guarded)} 2>/dev/null",
            '  chmod 755 "$sbv_d"; chmod 644 "$sbv_d"/*.py "$sbv_d"/*.json "$sbv_d"/tests.sh 2>/dev/null',
            f'  echo {ISOLATED} > "$sbv_d/privilege"',
            f'  sbv_as_tests() {{ {as_user(u)} env HOME="$sbv_d/home" GIT_CONFIG_COUNT=1 '
            f"GIT_CONFIG_KEY_0=safe.directory 'GIT_CONFIG_VALUE_0=*' \"$@\"; }}",
            "fi",
        ]
        return "\n".join(lines)

    def epilogue(self, workdir: str) -> str:
        """Shell run as root right after the test command: every process of the test user killed (what
        the tests left running could write on), the pipe closed and the recorder drained, then the
        workdir and the directories the prologue changed put back. `set -e` is not in force (the eval
        script's options are `-uxo pipefail`)."""
        u = self.uid
        return "\n".join([
            f'if [ -s "$sbv_d/modes" ]; then {kill_all(u)}; fi',
            f"exec {FD}>&-",
            # the recorder ends when the last writer closes the pipe; where no test user could be made, a
            # process the tests left behind may hold it: the recorder is stopped after 10 s of that
            'if [ -n "$sbv_rec" ]; then for sbv_i in $(seq 100); do kill -0 "$sbv_rec" 2>/dev/null || break; '
            'sleep 0.1; done; kill "$sbv_rec" 2>/dev/null; wait "$sbv_rec" 2>/dev/null; fi',
            f'if [ -s "$sbv_d/modes" ]; then find {shlex.quote(workdir)} -user {u} -exec chown "$sbv_owner" {{}} +',
            # each directory the prologue changed put back as `modes` has it (one stat for all of them, and a
            # chown and chmod for each that differs: most of those listed were not changed)
            '  sbv_n=(); while read -r sbv_m sbv_o sbv_p; do sbv_n+=("$sbv_p"); done < "$sbv_d/modes"',
            '  declare -A sbv_now=(); while read -r sbv_m sbv_o sbv_p; do sbv_now["$sbv_p"]="$sbv_m $sbv_o"; '
            'done < <(stat -c "%a %u:%g %n" -- "${sbv_n[@]}" 2>/dev/null)',
            '  while read -r sbv_m sbv_o sbv_p; do [ "${sbv_now["$sbv_p"]-}" = "$sbv_m $sbv_o" ] || '
            '{ chown "$sbv_o" "$sbv_p"; chmod "$sbv_m" "$sbv_p"; }; done < "$sbv_d/modes"',
            "fi",
        ])

    def _listing(self) -> str:
        """A script that prints the channel's verdict and what became of the test user, each under a header."""
        return (f"cd {shlex.quote(self.dir)} && for f in verdict.jsonl privilege files.* startup.* build.wrote; do "
                f'[ -f "$f" ] && printf "== %s\\n" "$f" && cat "$f" && echo; done; true')

    def after_run(self) -> tuple[str, str]:
        """(shell text to run right after the test command in its exec, the marker of its line): the
        listing on one line of the exec's output, base64-encoded, so that reading the verdict costs no
        operation of its own. The marker is new for every grade."""
        marker = f"SANDBATCH_VERDICT_{secrets.token_hex(8)}="
        return (f'; s=$?; printf "\\n{marker}"; {{ {self._listing()} ; }} 2>/dev/null | base64 -w0; echo; exit $s',
                marker)

    async def read(self, sandbox: "Sandbox", printed: bytes | None = None) -> Verdict:
        """The verdict; printed: the listing as the test command's exec printed it (taken_from), else
        it is read with an exec of its own."""
        if printed is None:
            res = await sandbox.exec(self._listing(), timeout=60, lost="rerun")
            printed = res.stdout.encode("utf-8", "surrogateescape") if res.ok else b""
        sections: dict[str, list[str]] = {}
        current = None
        for line in printed.decode("utf-8", "surrogateescape").splitlines():
            if m := _SECTION_RE.match(line):
                current = sections.setdefault(m.group(1), [])
            elif current is not None and line:
                current.append(line)
        v = parse("\n".join(sections.get("verdict.jsonl", [])).encode("utf-8", "surrogateescape"))
        v.isolation = " ".join(sections.get("privilege", [])) or "no test user was made"
        v.records = {k: lines for k, lines in sections.items() if k.startswith(("files.", "startup.", "build."))}
        return v


def placed_from(out: str, marker: str) -> tuple[str, dict[str, str] | None]:
    """(the output without the line of the placed test files, {path: source}): the first line that
    carries the marker (printed before the tests start: one the tests print later comes after it);
    None when there is none or it does not decode."""
    import io
    import tarfile

    lines = out.split("\n")
    at = next((i for i, ln in enumerate(lines) if ln.startswith(marker)), None)
    if at is None:
        return out, None
    try:
        data = base64.b64decode(lines[at][len(marker):].strip(), validate=True)
        files = {}
        if data:
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                for m in tar.getmembers():
                    fh = tar.extractfile(m) if m.isfile() else None
                    if fh is not None:
                        files[m.name] = fh.read().decode("utf-8", "replace")
    except (binascii.Error, ValueError, tarfile.TarError):
        return "\n".join(lines[:at] + lines[at + 1:]), None
    return "\n".join(lines[:at] + lines[at + 1:]), files


def taken_from(out: str, marker: str) -> tuple[str, bytes | None]:
    """(the exec's output without the listing's line, the listing): None unless exactly one line carries
    the marker and decodes (a process of the tests may print too: the verdict is then read on its own)."""
    lines = out.split("\n")
    at = [i for i, ln in enumerate(lines) if ln.startswith(marker)]
    if len(at) != 1:
        return out, None
    try:
        printed = base64.b64decode(lines[at[0]][len(marker):].strip(), validate=True)
    except (binascii.Error, ValueError):
        return out, None
    rest = lines[:at[0]] + lines[at[0] + 1:]
    if at[0] > 0 and rest and rest[at[0] - 1] == "":  # the newline printed before the marker
        del rest[at[0] - 1]
    return "\n".join(rest), printed


def rootdirs(v: Verdict, log: str) -> list[str]:
    """pytest's rootdirs: the verdict's, or (with no verdict from a pytest that ran) the log's."""
    if v.state == "ok":
        return v.rootdirs
    return [m.strip() for m in _ROOTDIR_RE.findall(log)] if v.state in ("unsupported", "missing") else []


def check_rootdir(roots: list[str], workdir: str) -> None:
    """pytest's rootdir must be the workdir or inside it: above it, a configuration of the host applied."""
    wd = PurePosixPath(os.path.normpath(workdir))
    for root in roots:
        r = PurePosixPath(os.path.normpath(root))
        if r == wd or wd in r.parents:
            continue
        raise InfraError(f"pytest took {root} as its rootdir, outside the workdir {workdir}: a configuration above "
                         f"the workdir applies to the task's tests (see sandbox.local.root)",
                         FailureClass.GRADING_ROOTDIR)


_PYTEST = re.compile(r"(?:^|[\s;&|(/])(?:py\.test|pytest)(?=[\s;&|)]|$)")


def runs_pytest(command: str) -> bool:
    """Whether a test command starts pytest itself (`pytest ...`, `python -m pytest ...`): a run of it
    that left no verdict had its pytest kept from loading the channel. A command that reaches
    pytest through tox or a script of the task's may run none (a shell script printing pytest-style
    lines): there only a pytest that loaded the plugin is expected to answer."""
    return "tox" not in command.split() and bool(_PYTEST.search(command))


def compare(v: Verdict | None, expected: bool, status: dict[str, str], decisive: set[str],
            as_log: Callable[[dict[str, str]], dict[str, str]],
            test_files: frozenset[str] = frozenset()) -> tuple[list[dict[str, str]], bool]:
    """(tampering entries, whether the rollout may still be resolved). Tests the verdict contradicts
    are set to FAILED in `status`. as_log: the verdict's {nodeid: log status} in the parser's names.
    expected: the test command itself starts the runner (runs_pytest), so a run that left no verdict
    kept it from loading the channel; otherwise missing means no runner loaded it. test_files: the
    task's test files; a decisive test of one of them must have a raw call result whatever files the
    verdict says its sessions collected (the grader, not the record, decides what must answer)."""
    if v is None or v.state == "unsupported" or (v.state == "missing" and not expected):
        return [], True
    claimed = [t for t in decisive if status.get(t) in CLAIMED]
    if v.state != "ok" and not claimed:  # nothing the log claims needs the verdict (an honest crash, say)
        return [], True
    if v.state != "ok":
        for t in claimed:
            status[t] = "FAILED"
        return [entry("pytest", "runner_patched", "not_resolved", v.detail)], False
    seen = as_log({t: AS_LOG.get(k, "FAILED") for t, k in v.outcomes.items()})
    xfail_ok = {n for n, s in as_log({t: "XFAIL" for t in v.expected_failures}).items() if s == "XFAIL"}
    out = []
    for t in sorted(claimed):
        raw = seen.get(t)
        file = t.split("::")[0]
        if raw is None and v.files and file not in v.files and file not in test_files:
            continue  # not a test of any file the session collected: not the runner's to answer for
        # an expected failure: the body raised pytest.xfail, or its setup or body raised under an xfail
        # marker (pytest reports a setup error of an xfail-marked test as XFAIL too)
        ok = raw == "XFAIL" or (raw in ("FAILED", "ERROR") and t in xfail_ok) if status[t] == "XFAIL" \
            else raw == "PASSED"
        if not ok:
            why = "no raw call result for it" if raw is None else f"its raw call result reads {raw}"
            out.append(entry(t, "report_rewritten", "counted_failed", f"the log says {status[t]}, {why}"))
            status[t] = "FAILED"
    found, intact = plugin_findings.compare(v, claimed, status, as_log)
    out += found
    out += [entry(name, "runner_patched", "not_resolved", "replaced during the test run") for name in v.changed]
    out += [entry(name, "runner_patched", "not_resolved", "a plugin registered by code the tests import")
            for name in v.added]
    return out, intact and not (v.changed or v.added)
