"""Graders: one per benchmark family (a registry), what every grader gets, and the defences of a
grade. May import core, contracts, tasks, trace, sandbox, proxy and rollout; never a harness or above.

The code that runs inside the sandbox (the runner plugins, the start-up probe) is in in_sandbox/,
uploaded as files and never imported here.

Heavy grading libraries (swebench) are imported inside the grader functions only, so a
process that does not grade never pays for them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core.util import write_atomic

if TYPE_CHECKING:
    from .result import GradeResult
    from ..core.config import Config
    from ..sandbox import Sandbox
    from ..tasks import Task


@dataclass(frozen=True)
class Grader:
    target: str  # "module:function", an async function (GradeContext) -> GradeResult
    grades_empty_patch: bool  # False: an empty patch is "empty", not run (SWE-bench's convention)
    preload: tuple[str, ...] = ()  # the heavy modules it imports lazily, for the step server


# task.family -> grader
GRADERS: dict[str, Grader] = {
    "swebench": Grader("sandbatch.grading.swebench:grade", grades_empty_patch=False, preload=(
        "swebench.harness.constants", "swebench.harness.grading", "swebench.harness.log_parsers",
        "swebench.harness.test_spec.test_spec", "swebench.harness.test_spec.create_scripts",
        "swebench.harness.utils")),
    "swebench_pro": Grader("sandbatch.grading.swebench_pro:grade", grades_empty_patch=False),
    # the verifier decides: state outside the diff, or an agent sandbox, may still pass
    "terminal_bench": Grader("sandbatch.grading.terminal_bench:grade", grades_empty_patch=True),
}


@dataclass
class GradeContext:
    cfg: "Config"
    sandbox: "Sandbox"  # fresh from the task image, repository at base_ref (or the agent's own)
    task: "Task"
    patch: str
    base_ref: str
    timeout: float  # the grading budget (seconds) for running the tests
    log_path: str
    in_agent_sandbox: bool = False  # the agent's sandbox: its state is there already, apply nothing
    # grade.log's parts, appended as grading goes; the grade step writes them once, whatever happened
    log: list[str] = field(default_factory=list)


def grader_for(task: "Task") -> Grader:
    return GRADERS[task.family]


async def grade_task(g: GradeContext) -> "GradeResult":
    """Grade `g.patch` for `g.task` with the task family's grader: what it found (result.decide makes
    the outcome of it)."""
    module, _, func = grader_for(g.task).target.partition(":")
    return await getattr(importlib.import_module(module), func)(g)


def write_log(path: str, parts: list[str]) -> None:
    write_atomic(path, "\n".join(p for p in parts if p) + "\n")
