"""The verdict channel: each pytest test's outcome as the runner's raw call result had it,
compared with what the log parser read (docs/benchmarks.md, "The verdict channel").

Per grade, a random directory outside the workdir gets the plugin (verdict_plugin.py) under
a random module name and a random key; the test command runs with PYTEST_ADDOPTS=-p <name>
and that directory on PYTHONPATH. The plugin deletes the key as it loads, before any code
of the workdir runs, and writes verdict.jsonl there: one HMAC-chained line per setup and
call of each test, then an end record (what of the runner was replaced, plugins the code
under test registered, pytest's rootdir, the session's exit status). Here the file is read back and checked:

- a test the log calls passed (or an expected failure) whose call raised, or that has no
  verdict at all while its file is one of the task's test files or one the session
  collected, counts as failed: tampering
  kind `report_rewritten`, naming the test (a name of no file the session collected is not
  a test of this run: the log parser read it from output the tests print, such as the
  sessions pytest's own suite runs inside its tests, or `[100%]`);
- runner objects replaced during the run, plugin objects registered by workdir code, or a
  verdict that is altered, gone or ended early after a pytest took its key:
  `runner_patched`, the rollout is not resolved. No key taken means no pytest loaded the
  plugin (the test command ran none, or ran it where the exports do not reach, as tox does):
  there is no verdict to expect;
- a rootdir outside the workdir (a configuration above the workdir applied): an
  infrastructure error, grading_rootdir.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import base64
import binascii
import os
import re
import secrets
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Callable

from ..core.errors import InfraError
from . import integrity
from .verdict_record import Verdict

if TYPE_CHECKING:
    from ..sandbox import Sandbox

PLUGIN_SOURCE = Path(__file__).with_name("verdict_plugin.py")
# uploaded beside every runner plugin as _sbv_<name>.py, loaded by it from its file
SIBLINGS = {"channel": Path(__file__).with_name("verdict_channel.py"),
            "checks": Path(__file__).with_name("verdict_checks.py")}
KEYS = 8  # pytest processes a test command may start that each get a verdict of their own
_FILE_RE = re.compile(r"^== verdict\.(\d+)\.jsonl$")
_KEY_RE = re.compile(r"^== key\.(\d+)$")
# merging the verdicts of several processes: the worst outcome of a test wins
_RANK = {"ok": 0, "skipped": 1, "xfailed": 1, "raised": 2, "error": 2}
CLAIMED = ("PASSED", "XFAIL")  # what swebench counts as passed
# what each raw outcome reads as, in a pytest log
AS_LOG = {"ok": "PASSED", "raised": "FAILED", "error": "ERROR", "skipped": "SKIPPED", "xfailed": "XFAIL"}
_ROOTDIR_RE = re.compile(r"^rootdir: (.+?)(?:, (?:configfile|inifile|testpaths|plugins): .*)?$", re.M)


def entry(path: str, kind: str, action: str, detail: str) -> dict[str, str]:
    return {"path": path, "kind": kind, "action": action, "detail": detail}


def _mac(key: bytes, prev: str, body: str) -> str:
    return hmac.new(hashlib.sha256(key).digest(), (prev + body).encode("utf-8"), hashlib.sha256).hexdigest()


def parse(data: bytes | None, key: bytes) -> Verdict:
    """The verdict file as the plugin wrote it; any line the key did not sign ends the verdict as garbled."""
    if not data:
        return Verdict("missing", detail="the test run wrote no verdict")
    v, prev = Verdict("incomplete", detail="the test run ended before the verdict's end record"), ""
    for n, line in enumerate(data.decode("utf-8", "replace").splitlines()):
        try:
            wrapper = json.loads(line)
            body, mac = wrapper["r"], wrapper["m"]
            rec = json.loads(body)
        except (ValueError, KeyError, TypeError):
            return Verdict("garbled", detail=f"line {n + 1} of the verdict is not the plugin's")
        if not isinstance(mac, str) or not hmac.compare_digest(_mac(key, prev, body), mac) or rec.get("i") != n:
            return Verdict("garbled", detail=f"line {n + 1} of the verdict is not signed by this grade's key")
        prev = mac
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
        elif rec.get("w") in integrity.KINDS:
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


def merge(files: dict[int, bytes], keys: list[bytes], unclaimed: set[int] | None = None) -> Verdict:
    """The verdicts of every pytest process of the command as one: a file for each key taken (none
    for a key still on disk: unclaimed), each intact; a test's outcome is its worst in any of them."""
    unclaimed = set() if unclaimed is None else unclaimed
    taken = set(range(len(keys))) - unclaimed
    if set(files) != taken:
        return Verdict("garbled", detail=f"verdicts {sorted(files)} for the keys taken {sorted(taken)}")
    parts = [parse(data, keys[n]) for n, data in sorted(files.items())]
    if not parts:
        return parse(None, b"")
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


@dataclass
class Channel:
    dir: str
    module: str
    keys: list[bytes]
    test_files: list[str] = field(default_factory=list)  # the task's test files: their sha256 before the run
    # the line of the exec's output that carries the placed test files (declared.py), new for every grade
    placed_marker: str = field(default_factory=lambda: f"SANDBATCH_PLACED_{secrets.token_hex(8)}=")

    @classmethod
    def new(cls, tmpdir: str, test_files: list[str] | None = None) -> "Channel":
        return cls(dir=f"{tmpdir.rstrip('/')}/.v{secrets.token_hex(12)}", module=f"sbv_{secrets.token_hex(8)}",
                   keys=[secrets.token_hex(32).encode() for _ in range(KEYS)], test_files=list(test_files or []))

    def plugin(self) -> tuple[str, bytes]:
        """(file name, source) of the runner plugin in the channel's directory."""
        return f"{self.module}.py", PLUGIN_SOURCE.read_bytes()

    def files(self, workdir: str) -> dict[str, bytes]:
        """What goes into the channel's directory beside the keys: the plugin, its siblings, conf.json."""
        name, source = self.plugin()
        return {name: source, **{f"_sbv_{sib}.py": path.read_bytes() for sib, path in SIBLINGS.items()},
                "conf.json": integrity.conf(workdir)}

    def uploads(self, sandbox: Sandbox) -> dict[str, tuple[bytes, int]]:
        """The channel's files and its keys (readable by their owner alone), to be uploaded in one go
        with the grade's others. The plugin renames its key away, so the tests run as the user uploads
        write as (root, in the SWE-bench and Pro images)."""
        files = {f"{self.dir}/{name}": (data, 0o644) for name, data in self.files(sandbox.workdir).items()}
        files.update({f"{self.dir}/key.{n}": (k, 0o600) for n, k in enumerate(self.keys)})
        return files

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

    def _listing(self) -> str:
        """A script that prints the channel's unclaimed keys and its verdict files, each under a header."""
        return (f"cd {shlex.quote(self.dir)} && for f in key.* verdict.*.jsonl; do "
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
            res = await sandbox.exec(self._listing(), timeout=60)
            printed = res.stdout.encode("utf-8", "surrogateescape") if res.ok else b""
        files: dict[int, list[str]] = {}
        unclaimed: set[int] = set()
        current = None
        for line in printed.decode("utf-8", "surrogateescape").splitlines():
            if m := _KEY_RE.match(line):
                unclaimed.add(int(m.group(1)))
                current = None
            elif m := _FILE_RE.match(line):
                current = files.setdefault(int(m.group(1)), [])
            elif current is not None and line:
                current.append(line)
        return merge({n: "\n".join(lines).encode("utf-8", "surrogateescape") for n, lines in files.items()},
                     self.keys, unclaimed)


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
                         f"the workdir applies to the task's tests (see sandbox.local.root)", "grading_rootdir")


_PYTEST = re.compile(r"(?:^|[\s;&|(/])(?:py\.test|pytest)(?=[\s;&|)]|$)")


def runs_pytest(command: str) -> bool:
    """Whether a test command starts pytest itself (`pytest ...`, `python -m pytest ...`): a run of it
    that left no verdict had its pytest kept from loading the channel. A command that reaches
    pytest through tox or a script of the task's may run none (a shell script printing pytest-style
    lines): there only a pytest that took a key is expected to answer."""
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
    found, intact = integrity.compare(v, claimed, status, as_log)
    out += found
    out += [entry(name, "runner_patched", "not_resolved", "replaced during the test run") for name in v.changed]
    out += [entry(name, "runner_patched", "not_resolved", "a plugin registered by code the tests import")
            for name in v.added]
    return out, intact and not (v.changed or v.added)
