"""The task rows the benchmark loaders produce (sandbatch.tasks): the fields every benchmark
family has in `Task`, each family's own in a subclass, so that a grader reads the fields of
its family as typed attributes and nothing else has to know them.

- `SweTask`: a repository task graded by its tests (a gold patch, the tests it must make
  pass and keep passing); `SweBenchTask` (SWE-bench Verified / Multilingual, self-describing
  rows, the smoke tasks, NeMo Gym's SWE rows) and `SweBenchProTask` are its families;
- `TerminalBenchTask`: a task directory whose tests/ and solution/ grade and solve it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class Task(BaseModel):
    """One benchmark task, normalised across formats: what every family has."""

    id: str  # path- and wildcard-safe (sandbatch.core.ids.path_id)
    instance_id: str  # the benchmark's own id
    family: str = "swebench"  # grader family: swebench | swebench_pro | terminal_bench
    repo: str = ""
    base_commit: str | None = None
    problem_statement: str = ""
    prompt: str = ""  # what the agent is asked (the family's default; benchmark.prompt_template may wrap it)
    prompt_fields: dict[str, str] = Field(default_factory=dict)  # extra placeholders for prompt templates
    image: str | None = None
    workdir: str = "/testbed"
    entrypoint: list[str] | None = None  # keep-alive override for images whose ENTRYPOINT gets in the way
    resources: dict[str, str] = Field(default_factory=dict)  # the task's own cpu / memory / disk
    allow_internet: bool | None = None
    timeouts: dict[str, float] = Field(default_factory=dict)  # the task's own agent / grade limits (seconds)
    repo_dir: str | None = None  # absolute path of bundled repository files, if any
    snapshot_workdir: bool = False  # workdir is not a git checkout: commit its initial state as the base
    reset_to_base: bool = False  # hard-reset the checkout to base_commit (else a HEAD on top of it is kept)
    extra: dict[str, Any] = Field(default_factory=dict)  # every other field of the row


class SweTask(Task):
    """A repository task graded by its tests: SWE-bench's and SWE-bench Pro's common fields."""

    patch: str = ""  # the gold patch
    test_patch: str = ""
    fail_to_pass: list[str] = Field(default_factory=list)
    pass_to_pass: list[str] = Field(default_factory=list)


class SweBenchTask(SweTask):
    """SWE-bench Verified / Multilingual, self-describing rows, the smoke tasks, Gym's SWE rows."""

    version: str | None = None
    test_cmd: str | None = None
    log_parser: str | None = None  # a swebench log parser name (parse_log_pytest) or "pytest"
    eval_script: str | None = None  # self-describing rows: the script that applies test_patch and runs tests
    eval_type: str | None = None  # pass_and_fail | fail_only


class SweBenchProTask(SweTask):
    family: str = "swebench_pro"
    before_repo_set_cmd: str = ""
    selected_test_files: list[str] = Field(default_factory=list)
    run_script: str | None = None
    parser_script: str | None = None


class TerminalBenchTask(Task):
    family: str = "terminal_bench"
    task_dir: str  # the task directory on this host (tests/ and solution/ live there)
