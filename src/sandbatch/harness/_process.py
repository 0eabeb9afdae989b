"""What the agent harnesses share: running the agent command, and putting the agent there.

Every agent runs as one command in sandbox.workdir under a wall-clock limit; its stdout
lines become the raw events. Installation comes in three shapes, chosen by
`harness.config.install.method`: a harness-specific way (installer, npm, pip), `upload`
(a file or directory on this host copied into the sandbox), or `path` (already there).
"""

from __future__ import annotations

import asyncio
import io
import json
import shlex
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..core.errors import InfraError, UserError
from ..core.failures import FailureClass
from ..sandbox import Sandbox, SandboxError
from .base import InstallOptions

# A provider that does not stop a command at its timeout gets this much longer before the
# run is abandoned here (the patch step deletes the sandbox, and whatever still runs in it).
GRACE_S = 30.0

# stdout lines that are not JSON objects are kept as events of this type
TEXT_EVENT = "sandbatch.text"


@dataclass
class AgentRun:
    exit_code: int | None  # None when the run was stopped at its timeout
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float


async def run_command(sandbox: Sandbox, command: str | Sequence[str], *, timeout: float,
                      env: dict[str, str] | None = None, stdin: bytes | None = None,
                      cwd: str | None = None) -> AgentRun:
    """Run the agent in sandbox.workdir; stopped (and reported timed out) after `timeout` s.

    Output goes to files in the sandbox's tmpdir and is read back afterwards, so what an
    agent printed before it was killed at its timeout is kept.
    """
    q = shlex.quote
    out, err = f"{sandbox.tmpdir}/agent.stdout", f"{sandbox.tmpdir}/agent.stderr"
    cmd = command if isinstance(command, str) else shlex.join(command)
    script = f"cd {q(cwd or sandbox.workdir)} && exec {cmd} > {q(out)} 2> {q(err)}"
    t0 = time.monotonic()
    try:
        res = await asyncio.wait_for(sandbox.exec(script, timeout=timeout, env=env, stdin=stdin), timeout + GRACE_S)
        exit_code, timed_out, note = (None if res.timed_out else res.exit_code), res.timed_out, res.stderr
    except asyncio.TimeoutError:
        exit_code, timed_out, note = None, True, f"the sandbox did not stop the agent at its {timeout:.0f} s timeout"
    duration = time.monotonic() - t0
    stdout, stderr = await _read(sandbox, out), await _read(sandbox, err)
    return AgentRun(exit_code, stdout, (stderr + note) if note.strip() else stderr, timed_out, duration)


async def _read(sandbox: Sandbox, path: str) -> str:
    try:
        return (await sandbox.download(path)).decode("utf-8", "replace")
    except SandboxError:
        return ""


def json_events(text: str) -> list[dict[str, Any]]:
    """One event per non-blank stdout line: the JSON object, or a text event for anything else."""
    events = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        events.append(obj if isinstance(obj, dict) else {"type": TEXT_EVENT, "text": line})
    return events


def str_env(env: dict[str, Any] | None) -> dict[str, str]:
    """A config's env mapping as strings (YAML gives numbers and booleans too)."""
    return {str(k): str(v) for k, v in (env or {}).items()}


# --- installation --------------------------------------------------------------------------

def install_options(harness: str, install: InstallOptions, methods: Sequence[str]) -> InstallOptions:
    """The validated `install` block; UserError for an unknown method or a missing/bad path."""
    if install.method not in methods:
        raise UserError(f"harness.config.install.method: {install.method!r} is not allowed for harness {harness}; "
                        f"choose one of: {', '.join(methods)}")
    if install.method == "upload":
        if not install.source:
            raise UserError(f"harness.config.install.source: install.method 'upload' needs the path of the "
                            f"{harness} program (file or directory) on this host")
        if not Path(install.source).expanduser().exists():
            raise UserError(f"harness.config.install.source: {install.source} does not exist on this host; "
                            f"give the path of the {harness} program to upload")
    if install.method == "path" and not install.path:
        raise UserError(f"harness.config.install.path: install.method 'path' needs the {harness} "
                        f"program's path inside the sandbox image")
    return install


async def upload_source(sandbox: Sandbox, source: str, dest: str, timeout: float) -> str:
    """Copy a host file (executable) or directory into the sandbox at `dest`; return `dest`."""
    src = Path(source).expanduser()
    if src.is_file():
        await sandbox.upload(dest, src.read_bytes(), mode=0o755)
        return dest
    archive = f"{dest}.tar"
    await sandbox.upload(archive, await asyncio.to_thread(_tar, src))
    q = shlex.quote
    await sh(sandbox, f"mkdir -p {q(dest)} && tar -xf {q(archive)} -C {q(dest)} && rm -f {q(archive)}",
             timeout=timeout, what=f"unpacking {source} in the sandbox")
    return dest


def _tar(path: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for item in sorted(path.iterdir()):
            tar.add(item, arcname=item.name)  # symlinks stay links (npm prefixes use them)
    return buf.getvalue()


async def sh(sandbox: Sandbox, script: str, *, timeout: float, what: str,
             env: dict[str, str] | None = None) -> str:
    """Run an install script; InfraError (harness_install) with the output's tail if it fails."""
    res = await sandbox.exec(script, timeout=timeout, env=env, cwd=sandbox.tmpdir)
    if not res.ok:
        why = "timed out" if res.timed_out else f"exit {res.exit_code}"
        raise InfraError(f"{what} failed ({why}): {(res.stdout + res.stderr).strip()[-500:]}",
                         FailureClass.HARNESS_INSTALL)
    return res.stdout


async def npm_install(sandbox: Sandbox, opts: Any, version: str | None, prefix: str, *, timeout: float,
                      env: dict[str, str]) -> None:
    """`npm install -g` of the install block's package at `version` under `prefix` (install.env added)."""
    spec = f"{opts.package}@{version}"
    await sh(sandbox, f"npm install -g --no-audit --no-fund --prefix {shlex.quote(prefix)} {shlex.quote(spec)}",
             timeout=timeout, what=f"npm install {spec}", env={**env, **str_env(opts.env)})


async def check_runs(sandbox: Sandbox, binary: str, env: dict[str, str]) -> None:
    """The installed agent answers `--version` (an install that cannot run fails here, as an install)."""
    await sh(sandbox, f"{shlex.quote(binary)} --version", timeout=120, what=f"running {binary} --version", env=env)
