"""Terminal-Bench 2.x task directories (the Harbor task format).

benchmark.tasks names a directory with one sub-directory per task:
`task.toml`, `instruction.md` (the prompt), `tests/test.sh` (+ test files),
`solution/solve.sh` (the reference solution) and `environment/` (its Dockerfile; the
image itself is `[environment] docker_image`). The agent never sees tests/ or solution/:
the grader uploads tests/ after the agent is done.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from ..contracts.tasks import TerminalBenchTask
from ..core.errors import UserError
from ..core.ids import path_id
from .base import schema_error, validator

SCHEMA = "tasks/terminal_bench.schema.yaml"
FAMILY = "terminal_bench"  # the grader family of every task this loader makes
WORKDIR = "/app"
KEEP_ALIVE = ["/bin/sh", "-c", "sleep infinity"]


def task_dirs(root: Path) -> list[Path]:
    if not root.is_dir():
        raise UserError(f"{str(root)!r} is not a directory; point it at a directory of Terminal-Bench task "
                        f"directories (each with task.toml)", "benchmark.tasks")
    return sorted(p.parent for p in root.glob("*/task.toml"))


def fingerprint(root: Path) -> list[Any]:
    """What the cached index depends on: every task's files that the loader reads."""
    out: list[Any] = []
    for d in task_dirs(root):
        for name in ("task.toml", "instruction.md", "tests/test.sh", "solution/solve.sh"):
            try:
                st = (d / name).stat()
                out.append([d.name, name, st.st_mtime_ns, st.st_size])
            except FileNotFoundError:
                out.append([d.name, name, None])
    return out


def scan(root: Path) -> list[tuple[TerminalBenchTask, Any]]:
    return [(read(root, d.name), d.name) for d in task_dirs(root)]


def _line_of(text: str, table: str | None, key: str) -> int | None:
    """Line of `key =` (inside `[table]` if given) in a TOML text, for error messages."""
    current = None
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        m = re.match(r"^\[+\s*([^\]]+?)\s*\]+", s)
        if m:
            current = m.group(1)
            if table and current == table and not key:
                return n
            continue
        if current == table and re.match(rf"^{re.escape(key)}\s*=", s):
            return n
    return None


def read(root: Path, name: str) -> TerminalBenchTask:
    d = root / name
    toml_path = d / "task.toml"
    try:
        text = toml_path.read_text(encoding="utf-8")
        meta = tomllib.loads(text)
    except FileNotFoundError:
        raise UserError(f"{toml_path}: not found; every task directory needs a task.toml") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{toml_path}: not valid TOML ({exc})") from None
    try:
        schema_error(str(toml_path), validator(SCHEMA), meta)
    except UserError as exc:
        # point at the line: "<file>: field environment.cpus: ..." -> "<file>:<line>: field ..."
        m = re.match(rf"^{re.escape(str(toml_path))}: field ([\w.]+):", str(exc))
        if m:
            parts = m.group(1).split(".")
            line = _line_of(text, ".".join(parts[:-1]) or None, parts[-1]) or _line_of(text, parts[0], "")
            if line:
                raise UserError(str(exc).replace(f"{toml_path}:", f"{toml_path}:{line}:", 1)) from None
        raise
    instruction = d / "instruction.md"
    if not instruction.is_file():
        raise UserError(f"{instruction}: not found; the task's prompt lives in instruction.md")
    if not (d / "tests" / "test.sh").is_file():
        raise UserError(f"{d / 'tests' / 'test.sh'}: not found; the verifier runs tests/test.sh")
    env = meta.get("environment", {})
    image = env.get("docker_image")
    if not image:
        line = _line_of(text, "environment", "") or 1
        raise UserError(f"{toml_path}:{line}: field environment.docker_image: missing; "
                        f"build the task's image from environment/ and name it here")
    resources: dict[str, str] = {}
    if env.get("cpus") is not None:
        resources["cpu"] = _num(env["cpus"])
    if env.get("memory_mb") is not None:
        resources["memory"] = f"{int(env['memory_mb'])}Mi"
    if env.get("storage_mb") is not None:
        resources["disk"] = f"{int(env['storage_mb'])}Mi"
    timeouts = {}
    for phase, table in (("agent", "agent"), ("grade", "verifier")):
        sec = meta.get(table, {}).get("timeout_sec")
        if sec is not None:
            timeouts[phase] = float(sec)
    prompt = instruction.read_text(encoding="utf-8")
    return TerminalBenchTask(
        id=path_id(name),
        instance_id=name,
        family=FAMILY,
        repo=str(meta.get("metadata", {}).get("category") or ""),
        problem_statement=prompt,
        prompt=prompt,
        image=image,
        workdir=env.get("workdir") or WORKDIR,
        entrypoint=KEEP_ALIVE,
        resources=resources,
        allow_internet=env.get("allow_internet"),
        timeouts=timeouts,
        snapshot_workdir=True,
        task_dir=str(d.resolve()),
        extra={"task_toml": meta},
    )


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)

