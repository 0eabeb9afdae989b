"""A finished run in the layout other tools read (`sandbatch export`, `aggregate.exports`).

`gym`: what NeMo Gym's `gym eval run` writes, so that its own tools (`gym eval profile`,
its trainers) read a run unchanged. In `<run>/gym/`:

- `rollouts_materialized_inputs.jsonl`: one row per rollout, the task's fields plus
  `responses_create_params` (the prompt the agent got, as Responses input), `agent_ref`
  (the harness), `_ng_task_index` and `_ng_rollout_index` (the repeat);
- `rollouts.jsonl`: one row per graded rollout, the same keys plus `response` (the
  rollout's response.json), `reward` and `resolved`;
- `rollouts_failures.jsonl`: rollouts that ended in an infrastructure error (no reward:
  never a 0), with `_ng_failure_class`, as Gym keeps its failed rollouts out of the main
  file. Their inputs stay in the inputs file, so Gym's profile of a run that had some
  needs its `++allow_partial_rollouts=True`, as for a Gym run with failures;
- `rollouts_training.jsonl`: the graded rollouts as training samples, one per segment of
  their token data (`_sandbatch_segment`: its number; null for a rollout without token
  data). A trainer reading a Gym result checks that each item's `prompt_token_ids` extend
  the previous item's prompt + generation (NeMo RL stops at the first that does not), which
  a rollout whose agent compacted its context breaks: each of its segments is a sample of
  its own, with every item (the context) but only that segment's training fields.
  rollouts.jsonl keeps one row per rollout, so that Gym's reward profile counts each once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from ..contracts.records import RESPONSE
from ..contracts.row import RolloutRow
from ..contracts.tasks import SweBenchTask, SweTask
from ..core.config import Config
from ..core.errors import UserError
from ..core.util import read_json, write_jsonl
from ..tasks import Task, read_task, select_tasks
from ..tasks.settings import prompt_for
from . import responses
from .token_join import TRAINING_FIELDS

GYM_DIR = "gym"
GYM_FILES = ("rollouts.jsonl", "rollouts_materialized_inputs.jsonl", "rollouts_failures.jsonl",
             "rollouts_training.jsonl")
TASK_INDEX, ROLLOUT_INDEX, SEGMENT = "_ng_task_index", "_ng_rollout_index", "_sandbatch_segment"
_GYM_KEYS = {"responses_create_params", "agent_ref", TASK_INDEX, ROLLOUT_INDEX}


def gym_task_fields(task: Task) -> dict[str, Any]:
    """The task as a row: the SWE-bench fields it has, then every other field of its row
    (a NeMo Gym row's `subset`, `split`, ... come back as they were)."""
    fields: dict[str, Any] = {"instance_id": task.instance_id, "repo": task.repo, "base_commit": task.base_commit,
                              "problem_statement": task.problem_statement}
    if isinstance(task, SweTask):
        fields.update({"version": task.version if isinstance(task, SweBenchTask) else None, "patch": task.patch,
                       "test_patch": task.test_patch, "FAIL_TO_PASS": task.fail_to_pass,
                       "PASS_TO_PASS": task.pass_to_pass})
    out = {k: v for k, v in fields.items() if v not in (None, "", [])}
    out.update({k: v for k, v in task.extra.items() if k not in _GYM_KEYS})
    return out


def gym_create_params(task: Task, prompt: str) -> dict[str, Any]:
    """The row's own `responses_create_params` (a NeMo Gym row), its `input` the prompt the
    agent got when the row had none."""
    params = dict(task.extra.get("responses_create_params") or {})
    if not params.get("input"):
        params["input"] = [responses.user_message(prompt)]
    return params


def segment_samples(response: Mapping[str, Any]) -> list[tuple[int | None, dict[str, Any]]]:
    """(segment, the response as its training sample) per segment of the response's token
    data: every item kept, the training fields only on that segment's turns. A response with
    one segment, or none, is its own sample."""
    output = list(response.get("output") or [])
    segments = sorted({i["segment"] for i in output if "segment" in i and TRAINING_FIELDS[0] in i})
    if len(segments) <= 1:
        return [(segments[0] if segments else None, dict(response))]
    return [(k, {**response, "output": [i if i.get("segment") == k or TRAINING_FIELDS[0] not in i else
                                        {key: v for key, v in i.items() if key not in TRAINING_FIELDS}
                                        for i in output]}) for k in segments]


def gym(cfg: Config, rows: Iterable[RolloutRow], out_dir: Path) -> dict[str, int]:
    """Write the gym layout of `rows` (rollouts.jsonl rows) into out_dir; the row counts."""
    rows = list(rows)
    done = {r.task_id for r in rows}
    tasks = [t for t in select_tasks(cfg.benchmark) if t.id in done]
    index = {t.id: i for i, t in enumerate(tasks)}
    if len(index) != len(done):
        missing = sorted(done - set(index))
        raise UserError(f"{cfg.run_dir}/rollouts.jsonl: task {missing[0]} is not in the run's benchmark.tasks "
                        f"({cfg.benchmark.tasks}); export from the working directory the run was started in")
    inputs, results, failures, training = [], [], [], []
    for ref in tasks:
        task = read_task(cfg.benchmark, ref)
        fields, params = gym_task_fields(task), gym_create_params(task, prompt_for(task, cfg.benchmark))
        for row in sorted((r for r in rows if r.task_id == ref.id), key=lambda r: r.repeat):
            keys = {"agent_ref": {"name": row.harness}, TASK_INDEX: index[ref.id], ROLLOUT_INDEX: row.repeat}
            inputs.append({**fields, "responses_create_params": params, **keys})
            if row.infra_error:
                failures.append({**fields, "responses_create_params": params, **keys,
                                 "_ng_failure_class": row.failure_class or "infra_error"})
                continue
            response = read_json(cfg.run_dir / ref.id / str(row.repeat) / RESPONSE)
            # an agent that failed or timed out earns what its patch earns (0 when ungraded), as in metrics.json
            outcome = {"reward": float(row.reward or 0.0), "resolved": bool(row.resolved), **keys}
            results.append({**fields, "responses_create_params": params, "response": response, **outcome})
            training += [{**fields, "responses_create_params": params, "response": sample, **outcome,
                          SEGMENT: segment} for segment, sample in segment_samples(response)]
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, data in zip(GYM_FILES, (results, inputs, failures, training)):
        write_jsonl(out_dir / name, data)
    return {"rollouts": len(results), "inputs": len(inputs), "failures": len(failures), "training": len(training)}


EXPORTERS = {"gym": gym}  # format -> writer; each writes into results/<run>/<format>/


def export(cfg: Config, fmt: str, rows: Iterable[RolloutRow]) -> Path:
    """Write the run in format `fmt` under its run directory; the directory written."""
    if fmt not in EXPORTERS:
        raise UserError(f"export: --format {fmt!r} is not known; choose one of: {', '.join(EXPORTERS)}")
    out = cfg.run_dir / fmt
    EXPORTERS[fmt](cfg, rows, out)
    return out
