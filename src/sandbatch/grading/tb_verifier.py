"""Terminal-Bench in the agent's own sandbox: the verifier runs alone, with a shell the agent
never saw, and writes its reward where only it is told to (docs/benchmarks.md, "Terminal-Bench
in the agent's sandbox").

- every process the agent left is frozen and killed before the verifier starts, or the
  grade is an infrastructure error (Sandbox.stop_processes: a container's processes but
  pid 1, the image's entrypoint with what it started, and the provider's own agent; on the
  local provider the processes whose HOME is the sandbox's);
- the shell is a static bash (Debian's bash-static) and the core tools a static busybox's
  applets (busybox-static), uploaded at grading time into a random directory that comes
  first on PATH: no dynamic loader, so neither LD_PRELOAD nor /etc/ld.so.preload reaches
  them; LD_PRELOAD, LD_LIBRARY_PATH and LD_AUDIT are unset for the rest, and an
  /etc/ld.so.preload the agent left is moved aside (tampering kind `runner_hook`);
- the verifier's scripts are uploaded with /logs/verifier rewritten to a directory of a
  random name made just before they run: the reward is read from there, so a reward file
  written to the place the task format names is never read.

Off with grading.tampering: log_only (the benchmark's own harness grades in the agent's
container with its own shell). The fresh-sandbox mode needs none of it: everything outside
the workdir is the image's.
"""

from __future__ import annotations

import secrets
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .tamper import verifier_command

if TYPE_CHECKING:
    from ..sandbox import Sandbox

BASH = ("/bin/bash-static", "/usr/bin/bash-static")  # Debian's bash-static on this host
BUSYBOX = ("/bin/busybox", "/usr/bin/busybox")  # Debian's busybox-static
CORE_TOOLS = ("cat", "head", "tail", "ls", "mkdir", "rm", "cp", "mv", "chmod", "touch", "wc", "tr", "cut", "sort",
              "uniq", "cmp", "env", "sleep", "tee", "basename", "dirname", "grep", "sed", "printf", "echo")
PRELOAD = "/etc/ld.so.preload"


def _first(paths: tuple[str, ...]) -> bytes | None:
    for p in paths:
        if Path(p).is_file():
            return Path(p).read_bytes()
    return None


@dataclass
class Isolation:
    dir: str  # the random directory: bash, bin/<core tool>
    logs: str  # where the verifier's scripts write /logs/verifier's files
    shell: str = ""  # the uploaded bash, or "" (none on this host: the image's)
    notes: list[str] = field(default_factory=list)
    tampering: list[dict[str, str]] = field(default_factory=list)


async def prepare(sandbox: "Sandbox", logs_root: str) -> Isolation:
    """Stop the agent's processes and bring the verifier's shell and tools in."""
    iso = Isolation(dir=f"{sandbox.tmpdir.rstrip('/')}/.t{secrets.token_hex(10)}",
                    logs=f"{logs_root.rstrip('/')}/verifier-{secrets.token_hex(10)}")
    bash, busybox = _first(BASH), _first(BUSYBOX)
    if bash is not None:
        await sandbox.upload(f"{iso.dir}/bash", bash, mode=0o755)
        iso.shell = f"{iso.dir}/bash"
    else:
        iso.notes.append("no static bash on this host (apt-get install bash-static): the image's shell runs")
    killed = await sandbox.stop_processes(iso.shell)
    iso.notes.append(f"stopped {killed} processes left in the sandbox" if killed >= 0 else
                     "this provider cannot stop the processes left in the sandbox")
    # one command: the core tools' links, the agent's preload moved aside; idempotent (a second
    # run, after a transport lost the first one's answer, reports the same), so it may be rerun
    steps = []
    if busybox is not None:
        await sandbox.upload(f"{iso.dir}/bin/busybox", busybox, mode=0o755)
        links = " && ".join(f"ln -sf busybox {t}" for t in CORE_TOOLS)
        steps.append(f"(cd {shlex.quote(iso.dir)}/bin && {links})")
    if sandbox.map_path(PRELOAD) == PRELOAD:  # the sandbox has an /etc of its own (not the local provider)
        aside = shlex.quote(f"{iso.dir}/ld.so.preload")
        steps.append(f"if [ -e {PRELOAD} ]; then mv {PRELOAD} {aside}; fi; if [ -e {aside} ]; then echo moved; fi")
    if steps:
        res = await sandbox.exec("; ".join(steps), timeout=60, lost="rerun")
        if "moved" in res.stdout.split():
            iso.tampering.append({"path": PRELOAD, "kind": "runner_hook", "action": "removed"})
    return iso


def command(iso: Isolation, script: str, workdir: str) -> str:
    """The verifier's command: its shell, its tools first on a PATH cleaned as for every verifier."""
    return "unset LD_PRELOAD LD_LIBRARY_PATH LD_AUDIT; " + verifier_command(
        script, workdir, True, shell=iso.shell, tools=f"{iso.dir}/bin")
