"""The verdict channel: each pytest test's outcome as the runner's raw call result had it,
compared with what the log parser read (docs/benchmarks.md, "The verdict channel").

Per grade, a random directory outside the workdir gets the plugin (verdict_plugin.py) under
a random module name and a random key; the test command runs with PYTEST_ADDOPTS=-p <name>
and that directory on PYTHONPATH. The plugin deletes the key as it loads, before any code
of the workdir runs, and writes verdict.jsonl there: one HMAC-chained line per setup and
call of each test, then an end record (what of the runner was replaced, plugins the code
under test registered, pytest's rootdir). Here the file is read back and checked:

- a test the log calls passed (or an expected failure) whose call raised, or that has no
  verdict at all, counts as failed: tampering kind `report_rewritten`, naming the test;
- runner objects replaced during the run, plugin objects registered by workdir code, or a
  verdict that is missing, altered or ended early while pytest ran: `runner_patched`, the
  rollout is not resolved;
- a rootdir outside the workdir (a configuration above the workdir applied): an
  infrastructure error, grading_rootdir.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Callable

from ..errors import InfraError

if TYPE_CHECKING:
    from ..sandbox import Sandbox

PLUGIN_SOURCE = Path(__file__).with_name("verdict_plugin.py")
FILE = "verdict.jsonl"
CLAIMED = ("PASSED", "XFAIL")  # what swebench counts as passed
# what each raw outcome reads as, in a pytest log
AS_LOG = {"ok": "PASSED", "raised": "FAILED", "error": "ERROR", "skipped": "SKIPPED", "xfailed": "XFAIL"}
_ROOTDIR_RE = re.compile(r"^rootdir: (.+?)(?:, (?:configfile|inifile|testpaths|plugins): .*)?$", re.M)


def entry(path: str, kind: str, action: str, detail: str) -> dict[str, str]:
    return {"path": path, "kind": kind, "action": action, "detail": detail}


@dataclass
class Verdict:
    state: str  # ok | missing | garbled | incomplete | unsupported
    outcomes: dict[str, str] = field(default_factory=dict)  # nodeid -> ok | raised | error | skipped | xfailed
    expected_failures: set[str] = field(default_factory=set)  # tests marked xfail
    changed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    rootdir: str | None = None
    detail: str = ""


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
            v.changed, v.added, v.rootdir = list(rec.get("changed") or []), list(rec.get("added") or []), rec.get("rootdir")
            break
        elif "t" in rec:
            test, kind = str(rec["t"]), str(rec.get("k"))
            if rec.get("xf"):
                v.expected_failures.add(test)
            if rec.get("w") == "setup":  # a new attempt (reruns) starts with its setup
                v.outcomes[test] = "ok" if kind == "ok" else ("error" if kind == "raised" else kind)
            elif v.outcomes.get(test, "ok") == "ok":  # unittest's adapter records a failure before the call returns
                v.outcomes[test] = kind
    return v


@dataclass
class Channel:
    dir: str
    module: str
    key: bytes

    @classmethod
    def new(cls, tmpdir: str) -> "Channel":
        return cls(dir=f"{tmpdir.rstrip('/')}/.v{secrets.token_hex(12)}", module=f"sbv_{secrets.token_hex(8)}",
                   key=secrets.token_hex(32).encode())

    async def install(self, sandbox: "Sandbox") -> None:
        await sandbox.upload(f"{self.dir}/{self.module}.py", PLUGIN_SOURCE.read_bytes())
        await sandbox.upload(f"{self.dir}/key", self.key, mode=0o600)

    def exports(self) -> str:
        """Shell lines that load the plugin into every pytest the test command starts."""
        d = shlex.quote(self.dir)
        return (f'export PYTHONPATH={d}"${{PYTHONPATH:+:$PYTHONPATH}}"\n'
                f'export PYTEST_ADDOPTS="-p {self.module} ${{PYTEST_ADDOPTS:-}}"')

    async def read(self, sandbox: "Sandbox") -> Verdict:
        try:
            data = await sandbox.download(f"{self.dir}/{FILE}")
        except Exception:  # noqa: BLE001 - no file: the plugin never ran (or its file was removed)
            data = None
        return parse(data, self.key)


def pytest_ran(log: str) -> bool:
    return "test session starts" in log or bool(_ROOTDIR_RE.search(log))


def rootdir(v: Verdict, log: str) -> str | None:
    """pytest's rootdir: the verdict's, or (with no verdict from a pytest that ran) the log's."""
    if v.state == "ok":
        return v.rootdir
    m = _ROOTDIR_RE.search(log) if v.state in ("unsupported", "missing") else None
    return m.group(1).strip() if m else None


def check_rootdir(root: str | None, workdir: str) -> None:
    """pytest's rootdir must be the workdir or inside it: above it, a configuration of the host applied."""
    if not root:
        return
    wd, r = PurePosixPath(os.path.normpath(workdir)), PurePosixPath(os.path.normpath(root))
    if r != wd and wd not in r.parents:
        raise InfraError(f"pytest took {root} as its rootdir, outside the workdir {workdir}: a configuration above "
                         f"the workdir applies to the task's tests (see sandbox.local.root)", "grading_rootdir")


def compare(v: Verdict | None, expected: bool, status: dict[str, str], decisive: set[str],
            as_log: Callable[[dict[str, str]], dict[str, str]]) -> tuple[list[dict[str, str]], bool]:
    """(tampering entries, whether the rollout may still be resolved). Tests the verdict contradicts
    are set to FAILED in `status`. as_log: the verdict's {nodeid: log status} in the parser's names."""
    if v is None or v.state == "unsupported" or (v.state == "missing" and not expected):
        return [], True
    claimed = [t for t in decisive if status.get(t) in CLAIMED]
    if v.state != "ok":
        for t in claimed:
            status[t] = "FAILED"
        return [entry("pytest", "runner_patched", "not_resolved", v.detail)], False
    seen = as_log({t: AS_LOG.get(k, "FAILED") for t, k in v.outcomes.items()})
    xfail_ok = {n for n, s in as_log({t: "XFAIL" for t in v.expected_failures}).items() if s == "XFAIL"}
    out = []
    for t in sorted(claimed):
        raw = seen.get(t)
        # an expected failure: the body raised pytest.xfail, or raised under an xfail marker
        ok = raw == "XFAIL" or (raw == "FAILED" and t in xfail_ok) if status[t] == "XFAIL" else raw == "PASSED"
        if not ok:
            why = "no raw call result for it" if raw is None else f"its raw call result reads {raw}"
            out.append(entry(t, "report_rewritten", "counted_failed", f"the log says {status[t]}, {why}"))
            status[t] = "FAILED"
    out += [entry(name, "runner_patched", "not_resolved", "replaced during the test run") for name in v.changed]
    out += [entry(name, "runner_patched", "not_resolved", "a plugin registered by code the tests import")
            for name in v.added]
    return out, not (v.changed or v.added)
