"""Step 5: grade the patch in a fresh sandbox from the task's image; write grade.json.

Terminal-Bench tasks listed in grading.in_agent_sandbox are graded in the agent's own
sandbox instead (the patch step left it alive); it is deleted here afterwards.
"""

from __future__ import annotations

import asyncio

from .. import trace
from ..core.errors import InfraError
from ..core.failures import FailureClass
from ..grading import GradeContext, grade_task, grader_for, write_log
from ..contracts.records import (GRADE, HARNESS, PATCH, PATCH_INFO, SANDBOX, GradeRecord, HarnessRecord, PatchRecord,
                               SandboxRecord, load)
from ..sandbox import Sandbox, SandboxGone
from ..contracts.sandbox import NetworkRecord
from ..tasks.settings import grades_in_agent_sandbox
from ..core import killpoint
from . import network
from .common import Step, timed
from .sandbox import build_spec, create_prepared


class GradeStep(Step):
    name = "grade"
    retry_in_process = True

    async def _agent_sandbox(self, info: PatchRecord) -> tuple[Sandbox, str]:
        handle = info.kept_sandbox or load(SandboxRecord, self.ctx.path(SANDBOX))  # records of older runs
        try:
            sandbox = await self.ctx.provider.connect(handle.sandbox_id, handle.spec)
        except SandboxGone:
            raise SandboxGone(f"the agent's sandbox {handle.sandbox_id} is gone and this task is graded in it "
                              f"(grading.in_agent_sandbox); rerun the rollout") from None
        return sandbox, handle.base_ref or "HEAD"

    async def run(self) -> None:
        ctx = self.ctx
        await self.recovery.clear()  # grading sandboxes of an interrupted attempt
        info = load(PatchRecord, ctx.path(PATCH_INFO))
        if info.failed_infra:
            return self._save(GradeRecord(status="infra_error", failure_class=info.failure_class, error=info.error))
        patch = ctx.path(PATCH).read_bytes().decode("utf-8", "surrogateescape")
        in_agent = grades_in_agent_sandbox(ctx.cfg, ctx.task)
        if not patch.strip() and not grader_for(ctx.task).grades_empty_patch:
            # SWE-bench's convention: an empty patch is "empty", not run
            return self._save(GradeRecord(patch_empty=True, failure_class=FailureClass.EMPTY_PATCH,
                                          report={"patch_is_None": False, "patch_exists": False,
                                                  "patch_successfully_applied": False, "resolved": False}))
        if in_agent:
            # graded where nothing can grade it again: a grade an interrupted attempt finished is kept
            key = self.recovery.key(PATCH_INFO, PATCH, grading=ctx.cfg.grading.model_dump(mode="json"))
            if await self.recovery.resume(key):
                handle = info.kept_sandbox or load(SandboxRecord, ctx.path(SANDBOX))
                await ctx.provider.delete(handle.sandbox_id)  # the attempt may have died before its delete
                return
            sandbox, base_ref = await self._agent_sandbox(info)
        else:
            key = None  # a fresh sandbox grades the saved patch again, as often as it takes
            sandbox, base_ref = await create_prepared(ctx, build_spec(ctx, "grade"), self.phases, step=self.name)
        timeout = ctx.scaled(ctx.timeouts.grade)
        g = GradeContext(cfg=ctx.cfg, sandbox=sandbox, task=ctx.task, patch=patch, base_ref=base_ref,
                         timeout=timeout, log_path=str(ctx.path("grade.log")), in_agent_sandbox=in_agent)
        try:
            result = await self._grade(g, timeout)
        except InfraError as exc:
            if not in_agent:
                raise
            # the attempt may have changed the agent's sandbox, which goes with it (below): no later
            # attempt can grade this rollout, so the first cause is the record's, not a later "gone"
            raise InfraError(f"{exc} (graded in the agent's sandbox, which this attempt used up: "
                             f"`sandbatch rerun-errors {ctx.cfg.run}` and the same command redo the rollout)",
                             exc.failure_class, final=True) from exc
        finally:
            if g.log:  # what grading did so far, whatever stopped it
                write_log(g.log_path, g.log)
            self.delete_later(sandbox)
        killpoint.reached("graded")
        rec = result.record(ctx.cfg.grading, patch_empty=not patch.strip(), network=self._network(in_agent))
        trace.event("verdict", resolved=rec.resolved, reward=rec.reward, status=rec.status,
                    failure_class=rec.failure_class, tampering=bool(rec.tampering), suspicious=bool(rec.suspicious))
        self._save(rec, key)

    async def _grade(self, g: GradeContext, timeout: float):
        """The grader's result; InfraError for whatever kept it from one."""
        try:
            with timed(self.phases, "tests"), trace.span("grader", **{"sandbatch.grader": grader_for(g.task).target}):
                result = await asyncio.wait_for(grade_task(g), timeout)
            await g.sandbox.ensure_alive("grading")
        except asyncio.TimeoutError:
            raise InfraError(f"grading took longer than {timeout:.0f} s", FailureClass.GRADE_TIMEOUT) from None
        except (InfraError, asyncio.CancelledError):
            raise
        except Exception as exc:
            raise InfraError(f"the grader crashed: {exc!r}", FailureClass.GRADER_CRASH) from exc
        return result

    def _network(self, in_agent: bool) -> NetworkRecord | None:
        """What the grading sandbox reached: the agent's network when graded in its sandbox."""
        if not in_agent:
            return network.grading_record(self.ctx.provider, self.ctx.task)
        path = self.ctx.path(HARNESS)
        agent = load(HarnessRecord, path).network if path.exists() else None
        return agent.model_copy(update={"reason": f"graded in the agent's sandbox: {agent.reason}"}) if agent else None

    def _save(self, rec: GradeRecord, key: dict | None = None) -> None:
        """The record; with `key` (the patch's identity) by way of a capture a rerun restores."""
        self.recovery.write({}, GRADE, self.stamp(rec), key)

    def fail(self, exc: InfraError) -> None:
        self._save(GradeRecord(status="infra_error", failure_class=exc.failure_class, error=str(exc)))
