"""The rollouts.jsonl row of one rollout (contracts.row.RolloutRow), from its step records.

The aggregate writes these rows; the metrics, the report, the plots and the viewer read them.
"""

from __future__ import annotations

from .. import trace
from ..contracts.records import (GRADE, HARNESS, PATCH_INFO, PHASES, RESPONSE, SANDBOX, GradeRecord, HarnessRecord,
                                 PatchRecord, SandboxRecord, final_status, load)
from ..contracts.response import RunData, Usage
from ..contracts.row import Durations, RolloutRow
from ..core.config import Config
from ..core.util import read_json
from ..tasks import TaskRef


def rollout_row(cfg: Config, task: TaskRef, repeat: int) -> RolloutRow:
    d = cfg.run_dir / task.id / str(repeat)
    sb = load(SandboxRecord, d / SANDBOX)
    hr = load(HarnessRecord, d / HARNESS)
    pr = load(PatchRecord, d / PATCH_INFO)
    gr = load(GradeRecord, d / GRADE)
    resp = read_json(d / RESPONSE)
    run = RunData.of(resp)
    final = final_status(dict(zip(PHASES, (sb, hr, pr, gr))))
    durations = Durations(sandbox=sb.duration_s, install=hr.install_s, agent=hr.agent_s, harness=hr.duration_s,
                          patch=pr.duration_s, grade=gr.duration_s, tests=gr.phases.get("tests"),
                          model=run.model_s)
    return RolloutRow(
        run=cfg.run, task_id=task.id, instance_id=task.instance_id, repo=task.repo, repeat=repeat,
        status=final.status, failure_class=final.failure_class, failed_phase=final.failed_phase, error=final.error,
        reward=gr.reward, resolved=gr.resolved, patch_empty=pr.empty, patch_bytes=pr.bytes,
        patch_applied=gr.patch_applied, tests_ran=gr.tests_ran,
        harness=hr.harness, harness_status=hr.status, exit_code=hr.exit_code,
        usage=Usage.model_validate(resp.get("usage") or {}), durations=durations, tests_status=gr.tests_status,
        tampering=gr.tampering, suspicious=gr.suspicious,
        token_join=run.token_join,
        traces_dropped=trace.dropped_spans(d),
        time_by_kind=trace.time_by_kind(trace.read_spans(d / trace.TRACE_FILE)),  # {} (None) without a trace file
        started_at=sb.started_at, finished_at=gr.finished_at, dir=str(d))
