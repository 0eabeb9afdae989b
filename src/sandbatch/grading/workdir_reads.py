"""The reads grading makes of a patched workdir before its tests run (the diff against the
snapshot, the patched files the checks look at), in one exec instead of one each: every
sandbox operation costs the engine tens of milliseconds, and a gold patch's checks made
three to five of them back to back.

`prefetch` runs the commands it is given in one script, each one's stdout base64-encoded on
a line of its own with whether it succeeded; `run` answers from those, and runs a command
it was not given (or every command, when the script's output cannot be read: an image
without `base64`) on its own, so the answers are always what the command alone prints.
"""

from __future__ import annotations

import base64
import binascii
import shlex
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from ..sandbox import Sandbox

_OK, _FAILED = "ok", "no"


class Reads:
    def __init__(self, sandbox: "Sandbox", cwd: str, timeout: float) -> None:
        self.sandbox, self.cwd, self.timeout = sandbox, cwd, timeout
        self._known: dict[str, bytes | None] = {}

    async def prefetch(self, commands: Iterable[str]) -> None:
        wanted = [c for c in dict.fromkeys(commands) if c not in self._known]
        if not wanted:
            return
        # a file per command, so a command's exit status is its own (no pipe) in any POSIX shell
        lines = ['t=$(mktemp) || exit 1']
        for cmd in wanted:
            lines.append(f'if {{ {cmd} ; }} > "$t" 2>/dev/null; then printf "{_OK} "; base64 -w0 < "$t"; echo; '
                         f'else echo {_FAILED}; fi')
        lines.append('rm -f "$t"')
        res = await self.sandbox.exec("\n".join(lines), timeout=self.timeout, cwd=self.cwd, lost="rerun")
        answers = res.stdout.split("\n") if res.ok else []
        if len(answers) < len(wanted):
            return  # unreadable: each command runs alone when asked
        parsed: dict[str, bytes | None] = {}
        for cmd, line in zip(wanted, answers):
            if line == _FAILED:
                parsed[cmd] = None
                continue
            if not line.startswith(f"{_OK} "):
                return
            try:
                parsed[cmd] = base64.b64decode(line[len(_OK) + 1:], validate=True)
            except (binascii.Error, ValueError):
                return
        self._known.update(parsed)

    async def run(self, command: str) -> bytes | None:
        """The command's stdout, None when it failed."""
        if command not in self._known:
            res = await self.sandbox.exec(command, timeout=self.timeout, cwd=self.cwd, lost="rerun")
            self._known[command] = res.stdout.encode("utf-8", "surrogateescape") if res.ok else None
        return self._known[command]

    async def text(self, command: str) -> str | None:
        out = await self.run(command)
        return None if out is None else out.decode("utf-8", "replace")


def cat(path: str) -> str:
    """The command that prints a file of the workdir."""
    return f"cat -- {shlex.quote(path)}"
