"""Step 5: grade the patch in a fresh sandbox from the task's image; write grade.json."""

from __future__ import annotations

import asyncio

from ..errors import InfraError
from ..grading import grade_task
from ..records import GRADE, PATCH, PATCH_INFO, GradeRecord, PatchRecord, load
from .common import Step
from .sandbox import build_spec, create_prepared


class GradeStep(Step):
    name = "grade"
    retry_in_process = True

    async def run(self) -> None:
        ctx = self.ctx
        info = load(PatchRecord, ctx.path(PATCH_INFO))
        if info.failed_infra:
            return self._save(GradeRecord(status="infra_error", failure_class=info.failure_class, error=info.error))
        patch = ctx.path(PATCH).read_bytes().decode("utf-8", "surrogateescape")
        if not patch.strip():
            # SWE-bench's convention: an empty patch is "empty", not run
            return self._save(GradeRecord(patch_empty=True, failure_class="empty_patch"))
        sandbox, base_ref = await create_prepared(ctx, build_spec(ctx, "grade"))
        try:
            timeout = ctx.scaled(ctx.cfg.timeouts.grade)
            rec = await asyncio.wait_for(
                grade_task(ctx.cfg, sandbox, ctx.task, patch, base_ref, timeout, str(ctx.path("grade.log"))),
                timeout)
        except asyncio.TimeoutError:
            raise InfraError(f"grading took longer than {ctx.scaled(ctx.cfg.timeouts.grade):.0f} s",
                             "grade_timeout") from None
        except (InfraError, asyncio.CancelledError):
            raise
        except Exception as exc:
            raise InfraError(f"the grader crashed: {exc!r}", "grader_crash") from exc
        finally:
            await asyncio.shield(sandbox.delete())
        self._save(rec)

    def _save(self, rec: GradeRecord) -> None:
        self.stamp(rec).save(self.ctx.path(GRADE))

    def fail(self, exc: InfraError) -> None:
        self._save(GradeRecord(status="infra_error", failure_class=exc.failure_class, error=str(exc)))
