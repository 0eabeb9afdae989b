"""Put a task's repository into a sandbox, the same way for the agent and the grader."""

from __future__ import annotations

import io
import shlex
import tarfile
from pathlib import Path

from ..core.failures import FailureClass
from ..tasks import Task
from .base import Sandbox, SandboxError

# removes every repository state HEAD does not reach (docs/benchmarks.md, "The agent's
# repository"); one bash script run with the image's own git, so images need no Python
STRIP_HISTORY = (Path(__file__).parent / "strip_history.sh").read_text(encoding="utf-8")
STRIP_MARK = "sandbatch-history "

# Fixed identity and dates make the base commit of bundled repositories identical in
# every sandbox, so the agent's and the grader's base refs agree.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "sandbatch", "GIT_AUTHOR_EMAIL": "sandbatch@localhost",
    "GIT_COMMITTER_NAME": "sandbatch", "GIT_COMMITTER_EMAIL": "sandbatch@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}


def tar_directory(path: str | Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for item in sorted(Path(path).rglob("*")):
            if "__pycache__" in item.parts or item.name == ".git":
                continue
            tar.add(item, arcname=str(item.relative_to(path)), recursive=False)
    return buf.getvalue()


def strips_history(task: Task) -> bool:
    """Whether the task's repository comes from its image (a checkout that may carry the
    repository's future). Bundled repositories are committed afresh; a workdir snapshot
    (Terminal-Bench) is the task's own state, its git history possibly part of the task."""
    return not task.repo_dir and not task.snapshot_workdir


def parse_history(lines: list[str]) -> list[dict[str, object]]:
    """The strip script's report lines, one dict per repository."""
    out: list[dict[str, object]] = []
    for line in lines:
        path, *fields = line[len(STRIP_MARK):].split(" ")
        kv = dict(f.split("=", 1) for f in fields)
        before, kept = (int(n) for n in kv["refs"].split("/"))
        objects, objects_after = (int(n) for n in kv["objects"].split("/"))
        size, size_after = (int(n) for n in kv["bytes"].split("/"))
        out.append({"path": path, "refs_before": before, "refs_kept": kept, "objects_before": objects,
                    "objects_after": objects_after, "bytes_before": size, "bytes_after": size_after,
                    "removed_refs": [r for r in kv.get("removed", "").split(",") if r]})
    return out


async def prepare_repo(sandbox: Sandbox, task: Task, timeout: float) -> str:
    """Make sandbox.workdir hold the task's repository at its base commit; return that commit."""
    base_ref, _ = await prepare(sandbox, task, timeout, strip=False)
    return base_ref


def checkout_script(task: Task, workdir: str, strip: bool) -> str:
    """The command that prepares an image's checkout (any task but a bundled repository) and
    prints the base commit, then with `strip` (applied only where strips_history) the
    strip script's report lines."""
    wd = shlex.quote(workdir)
    if task.snapshot_workdir:
        # not a checkout (Terminal-Bench): the initial state becomes the base commit, so
        # the agent's changes can be diffed and replayed; a task's own repository is kept
        script = (
            f"set -e; mkdir -p {wd}; cd {wd}; if [ ! -e .git ]; then git init -q; git add -A; "
            f"git commit -q --no-verify --allow-empty -m base; fi; git rev-parse HEAD"
        )
    elif task.base_commit and task.reset_to_base:
        script = f"set -e; cd {wd}; git reset -q --hard {shlex.quote(task.base_commit)}; git rev-parse HEAD"
    elif task.base_commit:
        # SWE-bench images commit their setup on top of the base commit: keep that HEAD
        base = shlex.quote(task.base_commit)
        script = (f"set -e; cd {wd}; if ! git merge-base --is-ancestor {base} HEAD 2>/dev/null; "
                  f"then git checkout -q {base}; fi; git rev-parse HEAD")
    else:
        script = f"set -e; cd {wd}; git rev-parse HEAD"
    if strip and strips_history(task):
        script += f"; bash -c {shlex.quote(STRIP_HISTORY)} sandbatch-strip {wd}"
    return script


def read_output(stdout: str, strip: bool) -> tuple[str, list[dict[str, object]] | None]:
    """(base commit, the strip reports or None) from what a preparation printed."""
    lines = stdout.strip().splitlines()
    report = [ln for ln in lines if ln.startswith(STRIP_MARK)]
    printed = [ln for ln in lines if not ln.startswith(STRIP_MARK)]
    if not printed:  # exit 0 and no commit: the exec's output was lost; the step's retry redoes it
        raise SandboxError(f"preparing the repository printed no commit (output: {stdout.strip()[-300:]!r})",
                           FailureClass.SANDBOX_PREPARE)
    return printed[-1], parse_history(report) if strip else None


async def prepare(sandbox: Sandbox, task: Task, timeout: float, *,
                  strip: bool) -> tuple[str, list[dict[str, object]] | None]:
    """prepare_repo, and with `strip` (the agent's sandboxes) in the same command the
    repository's future removed (strip_history.sh): (base commit, one report per
    repository, or None when nothing was stripped)."""
    strip = strip and strips_history(task)
    if task.repo_dir:
        wd, archive = shlex.quote(sandbox.workdir), f"{sandbox.tmpdir}/repo.tar"
        await sandbox.upload(archive, tar_directory(task.repo_dir))
        script = (
            f"set -e; mkdir -p {wd}; tar -xf {shlex.quote(archive)} -C {wd}; rm -f {shlex.quote(archive)}; "
            f"cd {wd}; git init -q; git add -A; git commit -q --no-verify -m base; git rev-parse HEAD"
        )
    else:
        script = checkout_script(task, sandbox.workdir, strip)
    result = await sandbox.exec(script, timeout=timeout, env=GIT_ENV, cwd="/" if not task.repo_dir else None)
    if not result.ok:
        raise SandboxError(
            f"preparing the repository failed (exit {result.exit_code}): {result.stderr.strip()[-300:]}",
            FailureClass.SANDBOX_PREPARE,
        )
    return read_output(result.stdout, strip)
