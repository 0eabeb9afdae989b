"""Graders per benchmark family. Heavy grading libraries are imported only here, lazily."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import Config
    from ..records import GradeRecord
    from ..sandbox import Sandbox
    from ..tasks import Task


async def grade_task(cfg: "Config", sandbox: "Sandbox", task: "Task", patch: str, base_ref: str,
                     timeout: float, log_path: str) -> "GradeRecord":
    """Grade `patch` for `task` inside `sandbox` (fresh, repository at `base_ref`)."""
    from . import swebench

    return await swebench.grade(sandbox, task, patch, base_ref, timeout, log_path)
