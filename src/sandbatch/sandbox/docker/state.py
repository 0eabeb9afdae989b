"""What the engine says about a container, and the spec's quantities in the engine's units."""

from __future__ import annotations

import posixpath
import re
from typing import Any

from pydantic import BaseModel

from ...core.errors import UserError
from ...core.failures import FailureClass
from ..base import SandboxError, SandboxGone, State

# an engine's words for a container that is not there, or not running (any call on it)
GONE = re.compile(r"No such container|No such object|is not running|removal of container .* is already in progress"
                  r"|is restarting|is paused|marked for removal|not found", re.IGNORECASE)


class ContainerState(BaseModel):
    """What the engine says about a container, beyond the provider-neutral State."""

    state: State
    status: str  # the engine's own word: running, exited, created, ...
    oom_killed: bool = False
    exit_code: int | None = None
    error: str = ""

    def describe(self) -> str:
        parts = [self.status]
        if self.exit_code is not None and self.status in ("exited", "dead"):
            parts.append(f"exit code {self.exit_code}")
        if self.oom_killed:
            parts.append("OOM-killed")
        if self.error:
            parts.append(self.error)
        return ", ".join(parts)


class SandboxOOM(SandboxGone):
    """The container was stopped by the kernel's OOM killer (its memory limit was too small)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.failure_class = FailureClass.SANDBOX_OOM


STATES: dict[str, State] = {
    "running": "running", "created": "pending", "restarting": "pending", "paused": "stopped",
    "exited": "stopped", "dead": "stopped", "removing": "gone",
}


def container_state(inspect: dict[str, Any]) -> ContainerState:
    st = inspect.get("State") or {}
    status = str(st.get("Status") or "unknown")
    return ContainerState(
        state=STATES.get(status, "unknown"),
        status=status,
        oom_killed=bool(st.get("OOMKilled")),
        exit_code=st.get("ExitCode"),
        error=str(st.get("Error") or ""),
    )


_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")
_UNITS = {
    "": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
}


def memory_bytes(quantity: str) -> int:
    """A Kubernetes-style memory quantity ("512Mi", "4Gi", "1G", "1048576") in bytes."""
    m = _QUANTITY.match(str(quantity))
    if not m or m.group(2) not in _UNITS:
        raise UserError(f"resources.memory: {quantity!r} is not a memory quantity; use e.g. 512Mi or 4Gi")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def cpu_count(quantity: str) -> float:
    """A Kubernetes-style cpu quantity ("2", "0.5", "500m") in cores."""
    text = str(quantity).strip()
    try:
        return int(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        raise UserError(f"resources.cpu: {quantity!r} is not a cpu quantity; use e.g. 2, 0.5 or 500m") from None


def sandbox_path(path: str) -> str:
    if not path.startswith("/"):
        raise SandboxError(f"{path!r}: sandbox paths must be absolute", FailureClass.SANDBOX_FILE)
    return posixpath.normpath(path)


def tail(data: bytes | bytearray | str, n: int = 400) -> str:
    text = data if isinstance(data, str) else bytes(data).decode("utf-8", "replace")
    text = " ".join(text.split())
    return text if len(text) <= n else "..." + text[-n:]
