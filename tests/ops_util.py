"""Running, interrupting and inspecting the real workflow from tests (stop, resume, faults).

Fault and delay injection happens outside the package: a `git` wrapper put first on PATH
(the local provider runs sandbox commands with the caller's PATH) sleeps or fails for the
git calls that match a rule, per sandbox role and task read from the sandbox's meta.json.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from sandbatch.sandbox.local import default_root
from workflow_util import REPO, SMOKE_TASKS

SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--cores", "2"]

GIT_WRAPPER = r'''#!{python} -S
import fcntl, json, os, sys, time
RULES, REAL = {rules!r}, {real!r}
def meta():
    d = os.getcwd()
    while d != "/":
        p = os.path.join(d, "meta.json")
        if os.path.isfile(p):
            try:
                return json.load(open(p)).get("labels", {{}})
            except ValueError:
                return {{}}
        d = os.path.dirname(d)
    return {{}}
def count(name):
    with open(name, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        n = len(fh.read())
        fh.write("x")
        return n
try:
    labels = meta()
except OSError:
    labels = {{}}
for i, r in enumerate(RULES):
    if r.get("flag") and not os.path.exists(r["flag"]):
        continue
    if r["cmd"] != (sys.argv[1] if len(sys.argv) > 1 else ""):
        continue
    if r.get("arg") and not any(r["arg"] in a for a in sys.argv[2:]):
        continue
    if any(labels.get(k) != v for k, v in r.get("labels", {{}}).items()):
        continue
    if "reached" in r:
        open(r["reached"], "a").close()
    if "sleep" in r:
        time.sleep(r["sleep"])
    if "fail" in r and count(r["counter"]) < r["fail"]:
        sys.stderr.write("injected git failure\n")
        sys.exit(97)
os.execv(REAL, [REAL] + sys.argv[1:])
'''


def fake_git(bindir: Path, rules: list[dict]) -> dict[str, str]:
    """Write a `git` wrapper applying `rules`; return an environment that uses it.

    A rule: {"cmd": "init", "arg": substring of an argument, "labels": {"role": "agent",
    "task": "smoke__calc-1"}, "sleep": seconds, "fail": first N calls fail (counted in
    "counter"), "flag": only while this file exists, "reached": a file made when a call matches,
    before its sleep (what a test waits for to know the call is in progress)}.
    """
    bindir.mkdir(parents=True, exist_ok=True)
    for i, r in enumerate(rules):
        r.setdefault("counter", str(bindir / f"rule{i}.count"))
    real = shutil.which("git")
    path = bindir / "git"
    path.write_text(GIT_WRAPPER.format(python=sys.executable, rules=rules, real=real))
    path.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    return env


def smoke_rows() -> list[dict]:
    rows = [json.loads(l) for l in SMOKE_TASKS.read_text().splitlines() if l.strip()]
    for r in rows:
        r["repo_dir"] = str((SMOKE_TASKS.parent / r["repo_dir"]).resolve())
    return rows


def write_tasks(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def start(workdir: Path, *args: str, env: dict | None = None, sigint: bool = True) -> subprocess.Popen:
    """Snakemake in its own session (so its group can be killed), output to workdir/snakemake.out.

    `sigint=True` restores the default SIGINT handler (an interactive shell's Ctrl-C); else the
    child inherits whatever the test runner has (background jobs of a script ignore SIGINT).
    """
    def pre():
        if sigint:
            signal.signal(signal.SIGINT, signal.SIG_DFL)

    out = open(workdir / "snakemake.out", "ab")
    return subprocess.Popen([*SNAKEMAKE, "-d", str(workdir), *args], cwd=workdir, env=env, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=pre)


def run(workdir: Path, *args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*SNAKEMAKE, "-d", str(workdir), *args], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=timeout)


def sandbatch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sandbatch.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def wait_for(cond: Callable[[], object], timeout: float, what: str, proc: subprocess.Popen | None = None):
    """Poll `cond()` until it is true (its value returned), at most `timeout` s; fail early if
    `proc` exits first. On giving up, say what `cond()` last gave."""
    deadline, value = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{' '.join(map(str, proc.args))[:200]} exited ({proc.returncode}) before: {what}")
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for: {what} (last seen: {value!r:.200})")


def sandboxes(workdir: Path, role: str | None = None, task: str | None = None) -> list[Path]:
    """The local provider's sandbox directories, optionally those of one role and task."""
    root = default_root(workdir)
    out = []
    for d in sorted(root.glob("*")) if root.is_dir() else []:
        if role is None and task is None:
            out.append(d)
            continue
        try:
            labels = json.loads((d / "meta.json").read_text()).get("labels", {})
        except (OSError, ValueError):
            continue
        if role in (None, labels.get("role")) and task in (None, labels.get("task")):
            out.append(d)
    return out


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL Snakemake's process group and every process of its tree (like a crashed host).

    The local provider runs sandbox commands in their own sessions; on a real host crash
    they die too, so the tree is collected first and killed with the group.
    """
    import psutil

    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    for p in tree:
        try:
            p.suspend()
        except psutil.NoSuchProcess:
            pass
    os.killpg(proc.pid, signal.SIGKILL)
    for p in tree:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait(timeout=30)
    psutil.wait_procs(tree, timeout=10)


def records(workdir: Path, run: str = "default") -> dict[str, tuple[int, bytes]]:
    """Every per-rollout record file -> (mtime_ns, content)."""
    out = {}
    for p in sorted((workdir / "results" / run).glob("*/*/*")):
        if p.is_file() and p.parts[-3] != "report":  # report/view/ holds the aggregate's viewer
            out[str(p.relative_to(workdir))] = (p.stat().st_mtime_ns, p.read_bytes())
    return out


VOLATILE = {"started_at", "finished_at", "durations", "dir"}


def stable_rows(rows: list[dict]) -> list[dict]:
    """rollouts.jsonl rows minus what differs between two identical runs (timings, dirs)."""
    return sorted(({k: v for k, v in r.items() if k not in VOLATILE} for r in rows),
                  key=lambda r: (r["task_id"], r["repeat"]))
