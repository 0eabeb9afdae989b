"""Step 4: extract the agent's patch (binary-safe, new files included), then delete the sandbox."""

from __future__ import annotations

import shlex

from ..core.errors import InfraError
from ..core.failures import FailureClass
from ..contracts.records import (HARNESS, PATCH, PATCH_INFO, SANDBOX, HarnessRecord, PatchRecord, SandboxRecord,
                               agent_handle, load)
from ..sandbox import Sandbox, SandboxError
from ..tasks.settings import grades_in_agent_sandbox
from ..core import killpoint
from .common import Step, timed


def diff_script(workdir: str, base_ref: str, out: str, exclude: list[str]) -> str:
    """Stage everything (so new files count) and diff the index against the base commit. File modes are
    not the agent's change: images that `chmod -R 777` the checkout without committing it (SWE-bench's
    JavaScript images) would otherwise put every tracked file, tests included, in the patch."""
    specs = " ".join(shlex.quote(f":(exclude,glob){g}") for g in exclude)
    base, o = shlex.quote(base_ref), shlex.quote(out)
    return (f"set -e; cd {shlex.quote(workdir)}; git -c core.fileMode=false add -A -- . {specs}; "
            f"git -c core.quotepath=off diff --cached --binary --full-index {base} > {o}; "
            f"git -c core.quotepath=off diff --cached --name-only {base}")


class PatchStep(Step):
    name = "patch"
    retry_in_process = True

    async def run(self) -> None:
        ctx = self.ctx
        harness = load(HarnessRecord, ctx.path(HARNESS))
        handle = agent_handle(load(SandboxRecord, ctx.path(SANDBOX)), harness)
        self.recovery.settle("harness")  # Snakemake recorded the agent run: a forced rerun redoes it
        # the agent run this patch comes from: its harness record and its sandbox
        key = self.recovery.key(HARNESS, sandbox_id=handle.sandbox_id)
        if await self.recovery.resume(key):  # captured by an attempt killed before it was recorded finished
            if load(PatchRecord, ctx.path(PATCH_INFO)).sandbox_deleted and handle.sandbox_id:
                await ctx.provider.delete(handle.sandbox_id)  # the attempt may have died before its delete
            return
        if handle.failed_infra or harness.failed_infra:
            failed = handle if handle.failed_infra else harness
            if handle.sandbox_id:
                await ctx.provider.delete(handle.sandbox_id)
            return self._write(b"", PatchRecord(status="infra_error", failure_class=failed.failure_class,
                                                error=f"upstream: {failed.error}", sandbox_deleted=True))
        sandbox = await ctx.provider.connect(handle.sandbox_id, handle.spec)
        out = f"{sandbox.tmpdir}/agent.patch"
        with timed(self.phases, "extract"):
            files = await self._diff(sandbox, handle.base_ref, out)
            data = await sandbox.download(out)
        if data and not data.endswith(b"\n"):
            data += b"\n"
        # the agent sandbox is done: the grader works in a fresh one (unless the task is
        # graded in the agent's own sandbox; the grade step deletes it then). It is deleted
        # only once the capture is kept: a rerun of a step killed after the delete restores it
        keep = grades_in_agent_sandbox(ctx.cfg, ctx.task)
        self._write(data, PatchRecord(bytes=len(data), files=files, empty=not data.strip(), sandbox_deleted=not keep,
                                      kept_sandbox=handle if keep else None), key)
        if not keep:
            self.delete_later(sandbox)

    @killpoint.after("extracted")
    async def _diff(self, sandbox: Sandbox, base_ref: str, out: str) -> list[str]:
        """Write the agent's change against `base_ref` to `out` in the sandbox; the files it touches."""
        cfg = self.ctx.cfg
        result = await sandbox.exec(diff_script(sandbox.workdir, base_ref, out, cfg.patch.exclude),
                                    timeout=self.ctx.scaled(cfg.timeouts.patch), lost="rerun")
        if not result.ok:
            raise SandboxError(f"git diff failed (exit {result.exit_code}): {result.stderr.strip()[-300:]}",
                               FailureClass.PATCH_EXTRACT)
        return [f for f in result.stdout.splitlines() if f.strip()]

    def _write(self, data: bytes, rec: PatchRecord, key: dict | None = None) -> None:
        """The outputs; with `key` (the agent run's identity) by way of a capture (steps.recovery)."""
        self.recovery.write({PATCH: data}, PATCH_INFO, self.stamp(rec), key)

    def fail(self, exc: InfraError) -> None:
        self._write(b"", PatchRecord(status="infra_error", failure_class=exc.failure_class, error=str(exc)))
