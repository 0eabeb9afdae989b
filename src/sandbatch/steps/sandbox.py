"""Step 1: create the rollout's sandbox and put the repository in it; write sandbox.json."""

from __future__ import annotations

import asyncio
import getpass

from ..errors import InfraError
from ..ids import label_value
from ..instance import ensure_instance, read_instance
from ..records import SANDBOX, SandboxRecord
from ..sandbox import Sandbox, SandboxError, SandboxSpec, rewrite_image
from ..sandbox.base import Resources
from ..sandbox.prepare import prepare_repo
from ..tasks.settings import resources_for
from . import kept, killpoint
from .common import Step, StepContext, timed


def run_labels(cfg, instance: str | None = None) -> dict[str, str]:
    """The labels every sandbox of this run instance carries (providers may prefix the keys).

    `instance` (sandbatch.instance) is what selects them: `run` and `owner` repeat across
    working directories. Steps make the id if the run has none yet (started by hand).
    """
    return {"run": label_value(cfg.run), "owner": label_value(cfg.sandbox.owner or getpass.getuser()),
            "instance": instance or ensure_instance(cfg.run_dir)}


def selector(cfg) -> dict[str, str] | None:
    """The labels that select exactly this run instance's sandboxes; None when it never
    started here (it has no id, so no sandbox can be its)."""
    instance = read_instance(cfg.run_dir)
    return None if instance is None else {"run": label_value(cfg.run), "instance": instance}


def build_spec(ctx: StepContext, role: str) -> SandboxSpec:
    cfg, task = ctx.cfg, ctx.task
    image = task.image or cfg.sandbox.default_image
    image = rewrite_image(image, cfg.sandbox.image_rewrites) if image else None
    labels = {**run_labels(cfg), "task": label_value(task.id), "repeat": str(ctx.repeat), "role": role}
    extra = {"allow_internet": task.allow_internet} if task.allow_internet is not None else {}
    return SandboxSpec(image=image, workdir=task.workdir, ttl_seconds=cfg.sandbox.ttl_seconds, labels=labels,
                       resources=Resources(**resources_for(cfg, task)), entrypoint=task.entrypoint, **extra)


async def create_prepared(ctx: StepContext, spec: SandboxSpec, phases: dict[str, float] | None = None,
                          step: str | None = None) -> tuple[Sandbox, str]:
    """A sandbox holding the task's repository at its base commit, or SandboxError (nothing left behind).

    The seconds of its `create` and `prepare` phases are added to `phases`. The sandbox is
    noted as `step`'s (steps.kept) as soon as it exists: a rerun of a killed `step` deletes it."""
    provider = ctx.provider
    timeout = ctx.scaled(ctx.cfg.timeouts.sandbox)
    try:
        with timed(phases, "create"):
            sandbox = await asyncio.wait_for(provider.create(spec), timeout)
    except asyncio.TimeoutError:
        raise SandboxError(f"creating the sandbox took longer than {timeout:.0f} s", "sandbox_create") from None
    try:
        if step:
            kept.note_sandbox(ctx.dir, step, sandbox.id)
        killpoint.reached("created")
        with timed(phases, "prepare"):
            base_ref = await prepare_repo(sandbox, ctx.task, timeout)
        killpoint.reached("prepared")
    except BaseException:
        await sandbox.delete()
        raise
    return sandbox, base_ref


def record_for(ctx: StepContext, spec: SandboxSpec) -> SandboxRecord:
    return SandboxRecord(provider=ctx.cfg.sandbox.provider, spec=spec, task_id=ctx.task.id,
                         instance_id=ctx.task.instance_id, repeat=ctx.repeat)


def fill(rec: SandboxRecord, sandbox: Sandbox, base_ref: str) -> SandboxRecord:
    rec.sandbox_id, rec.workdir, rec.tmpdir, rec.base_ref = sandbox.id, sandbox.workdir, sandbox.tmpdir, base_ref
    return rec


class SandboxStep(Step):
    name = "sandbox"

    async def run(self) -> None:
        # an interrupted attempt's sandbox was never handed on (sandbox.json is gone with the job)
        await kept.delete_noted(self.ctx.dir, self.name, self.ctx.provider)
        spec = build_spec(self.ctx, "agent")
        sandbox, base_ref = await create_prepared(self.ctx, spec, self.phases, step=self.name)
        try:
            self.stamp(fill(record_for(self.ctx, spec), sandbox, base_ref)).save(self.ctx.path(SANDBOX))
        except BaseException:
            await sandbox.delete()
            raise

    def fail(self, exc: InfraError) -> None:
        rec = record_for(self.ctx, build_spec(self.ctx, "agent"))
        rec.status, rec.failure_class, rec.error = "infra_error", exc.failure_class, str(exc)
        self.stamp(rec).save(self.ctx.path(SANDBOX))
