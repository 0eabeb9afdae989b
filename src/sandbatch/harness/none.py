"""`none`: changes nothing. The floor every agent must beat, and a cheap orchestration probe."""

from __future__ import annotations

from .. import responses
from .base import Conversion, Harness, Outcome, RunContext


class NoneHarness(Harness):
    name = "none"
    needs_model = False

    async def run(self, sandbox, ctx: RunContext) -> Outcome:
        return Outcome(events=[{"type": "noop"}], exit_code=0, status="ok")

    def convert(self, events, config) -> Conversion:
        unknown = sum(1 for ev in events if ev.get("type") != "noop")
        return Conversion(items=[responses.message("No changes made.")], unknown=unknown)
