"""What a task's run looks like under a config: prompt, per-phase timeouts, sandbox resources.

Precedence, lowest first: the config's defaults, the task's own values (Terminal-Bench
task.toml), then the config's per-repo overrides (benchmark.repo_resources).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..core.config import BenchmarkConfig, Config, Timeouts
    from ..contracts.tasks import Task

def prompt_for(task: "Task", bench: "BenchmarkConfig") -> str:
    """The prompt the agent gets: the family's default, or the configured template filled in."""
    if not bench.prompt_template:
        return task.prompt
    values = {"prompt": task.prompt, "problem_statement": task.problem_statement, "requirements": "",
              "interface": "", "instance_id": task.instance_id, "repo": task.repo, "workdir": task.workdir}
    values.update(task.prompt_fields)
    return bench.prompt_template.format_map(values)


def timeouts_for(cfg: "Config", task: "Task") -> "Timeouts":
    """cfg.timeouts with the task's own agent / grade limits, if benchmark.task_timeouts allows."""
    if not cfg.benchmark.task_timeouts or not task.timeouts:
        return cfg.timeouts
    return cfg.timeouts.model_copy(update={k: v for k, v in task.timeouts.items() if k in ("agent", "grade")})


def resources_for(cfg: "Config", task: "Task") -> dict[str, Any]:
    out = {k: v for k, v in cfg.benchmark.resources.model_dump().items() if v is not None}
    out.update({k: v for k, v in task.resources.items() if v is not None})
    repo = cfg.benchmark.repo_resources.get(task.repo)
    if repo is not None:
        out.update({k: v for k, v in repo.model_dump().items() if v is not None})
    return out


def grades_in_agent_sandbox(cfg: "Config", task: "Task") -> bool:
    """grading.in_agent_sandbox: true, or a list naming this task (Terminal-Bench only)."""
    flag = cfg.grading.in_agent_sandbox
    if task.family != "terminal_bench":
        return False
    return flag is True or (isinstance(flag, list) and task.instance_id in flag)
