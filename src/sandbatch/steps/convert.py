"""Step 3: the harness's raw events -> response.json (Responses output items + usage)."""

from __future__ import annotations

from datetime import datetime

from ..rollout import atif, responses, token_join, usage
from ..core.errors import InfraError
from ..harness import Conversion, get_harness
from ..contracts.records import EVENTS, HARNESS, MODEL_CALLS, RESPONSE, TRAJECTORY, HarnessRecord, load
from ..tasks.settings import prompt_for
from ..core.util import iter_jsonl, write_json
from .common import Step

_RESPONSE_STATUS = {"ok": "completed", "agent_error": "failed", "timeout": "incomplete", "infra_error": "failed"}


class ConvertStep(Step):
    name = "convert"

    async def run(self) -> None:
        ctx, cfg = self.ctx, self.ctx.cfg
        harness = get_harness(cfg.harness.name)
        rec = load(HarnessRecord, ctx.path(HARNESS))
        events = list(iter_jsonl(ctx.path(EVENTS)))
        opts = harness.options_of(cfg.harness.config)
        try:
            conv = harness.convert(events, opts)
        except Exception as exc:  # a converter bug must not block the aggregate; it is reported
            conv = Conversion(items=[], unknown=len(events), metadata={"conversion_error": repr(exc)})
        calls = [c for c in usage.iter_calls(ctx.path(MODEL_CALLS)) if usage.is_model_call(c)]
        # joined before inline_think, which changes the messages' text
        joined, turns = token_join.attach(conv.items, calls)
        items = responses.inline_think(conv.items) if opts.inline_think else conv.items
        totals = usage.summarize_usage(ctx.path(MODEL_CALLS))
        run = {"run": cfg.run, "harness": harness.name, "status": rec.status, "failure_class": rec.failure_class,
               "task_id": ctx.task_id, "instance_id": ctx.task.instance_id, "repeat": ctx.repeat,
               "events": len(events), "unknown_events": conv.unknown,
               "model_s": totals.latency_s,  # the model calls' latencies summed (metrics.json time_s)
               **({"token_join": joined.model_dump()} if joined else {}), **({"feedback": conv.feedback} if conv.feedback else {}),
               **conv.metadata}
        prompt = prompt_for(ctx.task, cfg.benchmark)
        resp = responses.response(items, usage.summarize(totals).model_dump(), cfg.model.name,
                                  _RESPONSE_STATUS[rec.status], run,
                                  int(datetime.fromisoformat(rec.started_at).timestamp()) if rec.started_at else None,
                                  conv.instructions, conv.input or [responses.user_message(prompt)])
        write_json(ctx.path(TRAJECTORY), atif.trajectory(
            resp, prompt,
            {"name": harness.name, "version": rec.version, "model_name": cfg.model.name if harness.needs_model else None},
            f"{cfg.run}/{ctx.task_id}/{ctx.repeat}", calls,
            {"sandbatch": {"run": cfg.run, "task_id": ctx.task_id, "instance_id": ctx.task.instance_id,
                           "repeat": ctx.repeat, "status": rec.status, "response_id": resp["id"]}}, turns))
        write_json(ctx.path(RESPONSE), resp)

    def fail(self, exc: InfraError) -> None:  # conversion touches no infrastructure
        raise exc

