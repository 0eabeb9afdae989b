"""`oracle`: applies the task's reference solution, so a run measures the graders and images.

The reference solution is the gold patch, or for Terminal-Bench `solution/solve.sh`
(uploaded to /solution and run in the workdir, as the agent would act). `hold_seconds`
keeps the sandbox that long after the agent started (an agent of fixed duration).
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path

from ..contracts.tasks import SweTask, TerminalBenchTask
from ..core.failures import FailureClass
from ..rollout import responses
from ..grading.apply import applied_method, apply_script
from ..grading.terminal_bench import upload_dir
from .base import Conversion, Harness, HoldOptions, Outcome, RunContext, hold, tail


class OracleHarness(Harness):
    name = "oracle"
    needs_model = False
    options = HoldOptions

    async def run(self, sandbox, ctx: RunContext) -> Outcome:
        start = time.monotonic()
        task = ctx.task
        outcome = await (self._solve(sandbox, ctx, task) if isinstance(task, TerminalBenchTask)
                         else self._apply(sandbox, ctx, task))
        await hold(sandbox, ctx, start)
        outcome.agent_s = time.monotonic() - start
        return outcome

    async def _apply(self, sandbox, ctx: RunContext, task: SweTask) -> Outcome:
        patch_path = f"{sandbox.tmpdir}/gold.patch"
        await sandbox.upload(patch_path, task.patch.encode("utf-8"))
        events = [{"type": "apply_patch", "path": patch_path, "bytes": len(task.patch.encode("utf-8"))}]
        start = time.monotonic()
        result = await sandbox.exec(apply_script(patch_path), timeout=ctx.timeouts.agent)
        events.append({"type": "apply_patch_result", "exit_code": result.exit_code,
                       "method": applied_method(result.stdout), "output": tail(result.stdout + result.stderr)})
        status, failure = self.status_for_exit(result.exit_code, result.timed_out)
        return Outcome(events=events, exit_code=result.exit_code, status=status, failure_class=failure,
                       timed_out=result.timed_out, stderr_tail=tail(result.stderr),
                       agent_s=time.monotonic() - start)

    async def _solve(self, sandbox, ctx: RunContext, task: TerminalBenchTask) -> Outcome:
        solution = Path(task.task_dir) / "solution"
        if not (solution / "solve.sh").is_file():
            return Outcome(events=[{"type": "error", "error": f"{solution}/solve.sh not found"}], exit_code=None,
                           status="agent_error", failure_class=FailureClass.NO_REFERENCE_SOLUTION)
        await upload_dir(sandbox, solution, "/solution", task.workdir)
        script = sandbox.map_path("/solution") + "/solve.sh"
        events = [{"type": "apply_patch", "path": "/solution/solve.sh", "bytes": (solution / "solve.sh").stat().st_size}]
        start = time.monotonic()
        result = await sandbox.exec(f"bash {shlex.quote(script)}", timeout=ctx.timeouts.agent, cwd=sandbox.workdir)
        # the agent must not leave the solution behind for the verifier to find
        await sandbox.exec(f"rm -rf {shlex.quote(sandbox.map_path('/solution'))}", timeout=60)
        events.append({"type": "apply_patch_result", "exit_code": result.exit_code, "method": "solve.sh",
                       "output": tail(result.stdout + result.stderr)})
        status, failure = self.status_for_exit(result.exit_code, result.timed_out)
        return Outcome(events=events, exit_code=result.exit_code, status=status, failure_class=failure,
                       timed_out=result.timed_out, stderr_tail=tail(result.stderr),
                       agent_s=time.monotonic() - start)

    def convert(self, events, opts) -> Conversion:
        items, unknown = [], 0
        for i, ev in enumerate(events):
            kind = ev.get("type")
            if kind == "apply_patch":
                items.append(responses.function_call(f"call_{i}", "apply_patch", {"path": ev.get("path")}))
            elif kind == "apply_patch_result":
                items.append(responses.function_call_output(f"call_{i - 1}", ev.get("output", "")))
                ok = ev.get("exit_code") == 0
                items.append(responses.message("Applied the reference patch." if ok else "The reference patch did not apply."))
            else:
                unknown += 1
        return Conversion(items=items, unknown=unknown)
