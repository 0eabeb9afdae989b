"""`none`: changes nothing. The floor every agent must beat, and a cheap orchestration probe
(`hold_seconds` makes it last a fixed time)."""

from __future__ import annotations

import time

from ..rollout import responses
from .base import Conversion, Harness, HoldOptions, Outcome, RunContext, hold


class NoneHarness(Harness):
    name = "none"
    needs_model = False
    options = HoldOptions

    async def run(self, sandbox, ctx: RunContext) -> Outcome:
        start = time.monotonic()
        await hold(sandbox, ctx, start)
        return Outcome(events=[{"type": "noop"}], exit_code=0, status="ok", agent_s=time.monotonic() - start)

    def convert(self, events, opts) -> Conversion:
        unknown = sum(1 for ev in events if ev.get("type") != "noop")
        return Conversion(items=[responses.message("No changes made.")], unknown=unknown)
