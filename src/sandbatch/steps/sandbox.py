"""Step 1: create the rollout's sandbox and put the repository in it; write sandbox.json."""

from __future__ import annotations

import asyncio
import time

from ..core.errors import InfraError
from ..core.failures import FailureClass
from ..core.ids import label_value
from ..core.instance import run_labels
from ..contracts.records import SANDBOX, HistoryRecord, SandboxRecord
from ..sandbox import Sandbox, SandboxError, SandboxSpec, rewrite_image
from ..contracts.sandbox import Resources
from ..sandbox.prepare import checkout_script, prepare, read_output, strips_history
from ..tasks.settings import resources_for
from ..core import killpoint
from . import kept, network
from .common import Step, StepContext, timed


def build_spec(ctx: StepContext, role: str) -> SandboxSpec:
    cfg, task = ctx.cfg, ctx.task
    image = task.image or cfg.sandbox.default_image
    image = rewrite_image(image, cfg.sandbox.image_rewrites) if image else None
    labels = {**run_labels(cfg), "task": label_value(task.id), "repeat": str(ctx.repeat), "role": role}
    # the agent's sandbox starts on the engine's network (the harness's install) and is
    # restricted before the agent runs; a grading sandbox has none (steps/network.py)
    allow = role == "agent" or network.grading_allows_internet(task)
    return SandboxSpec(image=image, workdir=task.workdir, ttl_seconds=cfg.sandbox.ttl_seconds, labels=labels,
                       resources=Resources(**resources_for(cfg, task)), entrypoint=task.entrypoint,
                       allow_internet=allow)


async def create_prepared(ctx: StepContext, spec: SandboxSpec, phases: dict[str, float] | None = None,
                          step: str | None = None) -> tuple[Sandbox, str]:
    """A sandbox holding the task's repository at its base commit, or SandboxError (nothing left behind).

    The seconds of its `create` and `prepare` phases are added to `phases`. The sandbox is
    noted as `step`'s (steps.kept) as soon as it exists: a rerun of a killed `step` deletes it."""
    sandbox, base_ref, _ = await _create(ctx, spec, phases, strip=False, step=step)
    return sandbox, base_ref


async def create_agent_sandbox(ctx: StepContext, spec: SandboxSpec, phases: dict[str, float] | None = None,
                               step: str | None = None) -> tuple[Sandbox, str, HistoryRecord | None]:
    """create_prepared for the agent: the repository's future also removed unless
    `sandbox.history` is keep (the grading sandbox, which the agent never sees, keeps it)."""
    setting = ctx.cfg.sandbox.history
    sandbox, base_ref, repos = await _create(ctx, spec, phases, strip=setting == "strip", step=step)
    return sandbox, base_ref, HistoryRecord.of(setting, repos) if strips_history(ctx.task) else None


async def _create(ctx: StepContext, spec: SandboxSpec, phases: dict[str, float] | None,
                  strip: bool, step: str | None) -> tuple[Sandbox, str, list[dict] | None]:
    provider = ctx.provider
    timeout = ctx.scaled(ctx.cfg.timeouts.sandbox)
    made = None
    if strip and strips_history(ctx.task):
        # done once per image where the provider keeps images (docker); the prepare below
        # then finds the checkout ready
        t0 = time.monotonic()
        made = await provider.image_after(spec, checkout_script(ctx.task, spec.workdir, strip=True), timeout)
        if made and phases is not None:
            phases["prepare_image"] = phases.get("prepare_image", 0.0) + time.monotonic() - t0
    try:
        with timed(phases, "create"):
            sandbox = await asyncio.wait_for(provider.create(
                spec.model_copy(update={"image": made[0]}) if made else spec), timeout)
    except asyncio.TimeoutError:
        raise SandboxError(f"creating the sandbox took longer than {timeout:.0f} s",
                           FailureClass.SANDBOX_CREATE) from None
    try:
        if step:
            kept.note_sandbox(ctx.dir, step, sandbox.id)
        killpoint.reached("created")
        with timed(phases, "prepare"):
            base_ref, repos = await prepare(sandbox, ctx.task, timeout, strip=strip and made is None)
        killpoint.reached("prepared")
    except BaseException:
        await sandbox.delete()
        raise
    if made:
        built_base, repos = read_output(made[1], strip=True)
        if built_base != base_ref:  # cannot happen unless the image was changed under its tag
            await sandbox.delete()
            raise SandboxError(f"image {made[0]} holds {built_base}, not {base_ref}", FailureClass.SANDBOX_PREPARE)
    return sandbox, base_ref, repos


def record_for(ctx: StepContext, spec: SandboxSpec) -> SandboxRecord:
    return SandboxRecord(provider=ctx.cfg.sandbox.provider, spec=spec, task_id=ctx.task.id,
                         instance_id=ctx.task.instance_id, repeat=ctx.repeat)


def fill(rec: SandboxRecord, sandbox: Sandbox, base_ref: str, history: HistoryRecord | None) -> SandboxRecord:
    rec.sandbox_id, rec.workdir, rec.tmpdir, rec.base_ref = sandbox.id, sandbox.workdir, sandbox.tmpdir, base_ref
    rec.history = history
    return rec


class SandboxStep(Step):
    name = "sandbox"

    async def run(self) -> None:
        # an interrupted attempt's sandbox was never handed on (sandbox.json is gone with the job)
        await self.recovery.clear()
        spec = build_spec(self.ctx, "agent")
        sandbox, base_ref, history = await create_agent_sandbox(self.ctx, spec, self.phases, step=self.name)
        try:
            self.stamp(fill(record_for(self.ctx, spec), sandbox, base_ref, history)).save(self.ctx.path(SANDBOX))
        except BaseException:
            await sandbox.delete()
            raise

    def fail(self, exc: InfraError) -> None:
        rec = record_for(self.ctx, build_spec(self.ctx, "agent"))
        rec.status, rec.failure_class, rec.error = "infra_error", exc.failure_class, str(exc)
        self.stamp(rec).save(self.ctx.path(SANDBOX))
