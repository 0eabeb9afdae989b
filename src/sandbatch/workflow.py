"""What the Snakefile needs at parse time: the validated config, the task table, the stamps."""

from __future__ import annotations

import json
import sys
from typing import Any

from .config import Config, parse, workflow_sources
from .errors import UserError
from .tasks import TaskRef, select_tasks


def load_run(workflow, config: dict[str, Any]) -> tuple[Config, dict[str, Any], list[TaskRef]]:
    """Validate the merged config and read the task table once; a user error exits in one line."""
    if workflow.is_main_process and not workflow.dryrun:
        # a killed run leaves locks and half-done jobs behind; the next plain `snakemake` resumes
        from .owners import recover

        for note in recover():
            print(note, file=sys.stderr)
    try:
        cfg = parse(config, workflow_sources(workflow, config))
        check_registries(cfg)
        tasks = select_tasks(cfg.benchmark)
        if not tasks:
            raise UserError(f"benchmark: no task of {cfg.benchmark.tasks} is selected by instance_ids/filter/limit")
    except UserError as exc:
        print(f"sandbatch: error: {exc}", file=sys.stderr)
        sys.exit(1)
    return cfg, cfg.model_dump(mode="json"), tasks


def check_registries(cfg: Config) -> None:
    """The schema's enums and the registries must agree; say so in one line if they do not."""
    from .harness import HARNESSES, get_harness
    from .sandbox import PROVIDERS

    if cfg.harness.name not in HARNESSES:
        raise UserError(f"harness.name: {cfg.harness.name!r} is not known; choose one of: {', '.join(HARNESSES)}")
    harness = get_harness(cfg.harness.name)
    harness.check_config(harness.merge_config(cfg.harness.config))  # e.g. pool's EULA switch
    if harness.needs_model and not cfg.model.base_url:
        raise UserError(f"model.base_url: harness {cfg.harness.name!r} talks to a model but none is set; give the "
                        "OpenAI-compatible endpoint (e.g. http://host:8000/v1) or name an environment "
                        "variable holding it in model.base_url_env")
    if cfg.sandbox.provider not in PROVIDERS:
        raise UserError(f"sandbox.provider: {cfg.sandbox.provider!r} is not known; choose one of: {', '.join(PROVIDERS)}")


def check_model(cfg: Config) -> None:
    """What the harness needs to know from the model endpoint (pool: its context window)."""
    from .harness import get_harness

    harness = get_harness(cfg.harness.name)
    harness.check_model(harness.merge_config(cfg.harness.config), cfg.model)


def check_model_or_exit(cfg: Config) -> None:
    """check_model when a real run starts (a plan needs no model): a user error exits in one line."""
    try:
        check_model(cfg)
    except UserError as exc:
        print(f"sandbatch: error: {exc}", file=sys.stderr)
        sys.exit(1)


def stamps(raw: dict[str, Any]) -> dict[str, str]:
    """Per-stage settings as canonical JSON: a stage reruns exactly when its stamp changes.

    `run` (the whole config) is read by every step but never triggers reruns of agent
    steps (they take it as ancient input); `grade` and `aggregate` do trigger their stage.
    """
    dump = lambda obj: json.dumps(obj, sort_keys=True, separators=(",", ":"))  # noqa: E731
    return {
        "run": dump(raw),
        "grade": dump({"grading": raw["grading"], "timeout": raw["timeouts"]["grade"]}),
        "aggregate": dump({"aggregate": raw["aggregate"]}),
    }
