"""Agent harnesses: the harness interface (base.py) and one module per harness, registered in
HARNESSES. May import core, contracts, tasks, trace, sandbox, proxy, rollout and grading; never a step."""

from __future__ import annotations

import importlib

from .base import Conversion, Harness, Outcome, RunContext

# name -> "module:class", imported lazily
HARNESSES: dict[str, str] = {
    "oracle": "sandbatch.harness.oracle:OracleHarness",
    "none": "sandbatch.harness.none:NoneHarness",
    "pool": "sandbatch.harness.pool:PoolHarness",
    "opencode": "sandbatch.harness.opencode:OpenCodeHarness",
    "mini-swe-agent": "sandbatch.harness.mini_swe_agent:MiniSweAgentHarness",
    "claude-code": "sandbatch.harness.claude_code:ClaudeCodeHarness",
    "codex": "sandbatch.harness.codex:CodexHarness",
}


def get_harness(name: str) -> Harness:
    module, _, cls = HARNESSES[name].partition(":")
    return getattr(importlib.import_module(module), cls)()


__all__ = ["Conversion", "Harness", "Outcome", "RunContext", "HARNESSES", "get_harness"]
