"""Task ids made safe for paths, Snakemake wildcards and Kubernetes-style labels."""

from __future__ import annotations

import hashlib
import re

_PATH_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
LABEL_MAX = 63


def _digest(value: str, n: int = 8) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:n]


def path_id(instance_id: str) -> str:
    """A directory-safe id; a short hash keeps distinct originals distinct after mangling."""
    safe = _PATH_UNSAFE.sub("_", instance_id).strip("._-") or "task"
    if safe == instance_id and len(safe) <= 120:
        return safe
    return f"{safe[:110]}-{_digest(instance_id)}"


def label_value(value: str) -> str:
    """A Kubernetes label value (<= 63 chars, alphanumeric at both ends), stable per input."""
    safe = _LABEL_UNSAFE.sub("-", value)
    safe = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", safe)
    if safe == value and len(safe) <= LABEL_MAX:
        return safe
    head = re.sub(r"[^A-Za-z0-9]+$", "", safe[: LABEL_MAX - 9])
    return f"{head}-{_digest(value)}" if head else _digest(value)
