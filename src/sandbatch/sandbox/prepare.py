"""Put a task's repository into a sandbox, the same way for the agent and the grader."""

from __future__ import annotations

import io
import shlex
import tarfile
from pathlib import Path

from ..tasks import Task
from .base import Sandbox, SandboxError

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


async def prepare_repo(sandbox: Sandbox, task: Task, timeout: float) -> str:
    """Make sandbox.workdir hold the task's repository at its base commit; return that commit."""
    wd = shlex.quote(sandbox.workdir)
    if task.repo_dir:
        archive = f"{sandbox.tmpdir}/repo.tar"
        await sandbox.upload(archive, tar_directory(task.repo_dir))
        script = (
            f"set -e; mkdir -p {wd}; tar -xf {shlex.quote(archive)} -C {wd}; rm -f {shlex.quote(archive)}; "
            f"cd {wd}; git init -q; git add -A; git commit -q --no-verify -m base; git rev-parse HEAD"
        )
    elif task.snapshot_workdir:
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
    result = await sandbox.exec(script, timeout=timeout, env=GIT_ENV, cwd="/" if not task.repo_dir else None)
    if not result.ok:
        raise SandboxError(
            f"preparing the repository failed (exit {result.exit_code}): {result.stderr.strip()[-300:]}",
            "sandbox_prepare",
        )
    return result.stdout.strip().splitlines()[-1]

