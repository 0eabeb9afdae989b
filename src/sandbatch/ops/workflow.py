"""What the Snakefile needs at parse time: the validated config, the task table, the stamps."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..core.config import Config, base_url_source, parse, run_config, source_of, workflow_sources
from ..core.errors import Collector, UserError, error_lines
from ..contracts.files import MANIFEST
from ..contracts.metrics import Metrics
from ..contracts.records import Manifest
from ..core.util import write_if_changed
from ..tasks import Task, TaskRef, read_task, select_tasks

SUMMARY_BY_CALLER = "SANDBATCH_SUMMARY_BY_CALLER"  # set: the workflow's end leaves the summary to its caller


def executes_jobs(workflow) -> bool:
    """This invocation runs jobs: the main process of a real run. Not a dry run, `--touch`, nor
    one that executes nothing at all (`--unlock`, `--report`, `--list-rules`: no executor).
    Known only once Snakemake executes (it sets the executor after reading the Snakefile)."""
    return (workflow.is_main_process and workflow.executor_plugin is not None
            and not workflow.dryrun and not workflow.touch)


def recover_before_run(workflow) -> None:
    """The one point where a run repairs what a killed run left behind (sandbatch.ops.owners.recover:
    stale locks, outputs of interrupted jobs). Called from the input function of the default
    target `all` (workflow/rules/common.smk): Snakemake evaluates it while it builds the DAG,
    after it knows whether it executes and before it checks outputs and takes its locks.
    Reading the Snakefile, a dry run, `--touch` or a report change nothing on disk."""
    if executes_jobs(workflow):
        from .owners import recover

        for note in recover():
            print(note, file=sys.stderr)


# the config sources of this Snakemake's run (load_run), for preflight's messages: onstart
# gets only the Config
_SOURCES: list[tuple[str, Mapping[str, Any]]] = []


def load_run(workflow, config: dict[str, Any]) -> tuple[Config, dict[str, Any], list[TaskRef]]:
    """Validate the merged config and read the task table once; a user error exits in one line."""
    try:
        _SOURCES[:] = workflow_sources(workflow, config)
        cfg, tasks = check_run(parse(config, _SOURCES), _SOURCES)
        if workflow.is_main_process:  # the jobs Snakemake spawns re-parse; they need not check again
            check_images(cfg, lambda: (read_task(cfg.benchmark, ref) for ref in tasks))
            # once per run: the jobs (steps, Slurm jobs) read the name from the run's settings
            cfg, note = resolve_model(cfg, started=True)
            if note:
                print(f"sandbatch: {note}", file=sys.stderr)
    except UserError as exc:
        print(*error_lines(located(exc, _SOURCES)), sep="\n", file=sys.stderr)
        sys.exit(1)
    return cfg, cfg.model_dump(mode="json"), tasks


def check_run(cfg: Config, sources: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> tuple[Config, list[TaskRef]]:
    """The config with its harness's options resolved (check_registries), and the selected
    tasks; every missing setting reported at once (one line each, with the config source that
    sets its key)."""
    errors = Collector(locate=lambda exc: located(exc, sources, cfg))
    with errors.check():
        cfg = check_registries(cfg, errors)
    tasks: list[TaskRef] = []
    with errors.check():
        tasks = select_tasks(cfg.benchmark)
        if not tasks:
            raise UserError(f"benchmark: no task of {cfg.benchmark.tasks} is selected by instance_ids/filter/limit")
    errors.raise_any()
    return cfg, tasks


def check_registries(cfg: Config, errors: Collector | None = None) -> Config:
    """The config with `harness.config` resolved over the harness's options (the one place it
    is: the run's settings hold it so, and every step reads it as it is), and everything a
    step would refuse, refused before any sandbox exists (one line each, all of them at once).

    The schema's enums and the registries must agree; the harness's install settings, the
    model endpoint, its key and the proxy address, and the sandbox service's address and
    key must all be there. Variables are named as the config names them.
    """
    from ..harness import HARNESSES, get_harness
    from ..sandbox import PROVIDERS, provider_class

    if cfg.harness.name not in HARNESSES:
        raise UserError(f"harness.name: {cfg.harness.name!r} is not known; choose one of: {', '.join(HARNESSES)}")
    harness = get_harness(cfg.harness.name)
    raise_here = errors is None
    errors = errors or Collector()
    opts = None
    with errors.check():
        cfg = cfg.model_copy(update={"harness": cfg.harness.model_copy(
            update={"config": harness.resolve_config(cfg.harness.config)})})
        opts = harness.options_of(cfg.harness.config)
        harness.check_config(opts)  # e.g. pool's EULA switch
    if cfg.sandbox.provider not in PROVIDERS:
        raise UserError(f"sandbox.provider: {cfg.sandbox.provider!r} is not known; choose one of: {', '.join(PROVIDERS)}")
    with errors.check():
        provider_class(cfg.sandbox.provider).check_options(cfg.sandbox.options())  # e.g. a service's address
    if harness.needs_model:
        _check_model(cfg, errors, on_host=opts is not None and harness.model_on_host(opts))
    if raise_here:
        errors.raise_any()
    return cfg


def resolve_model(cfg: Config, started: bool = False) -> tuple[Config, str]:
    """model.name resolved (sandbatch.proxy.served.resolve_model_name); started: a run that already has
    settings keeps the name it was started with when the endpoint does not answer."""
    from ..harness import get_harness
    from ..proxy.served import resolve_model_name

    before = None
    if started and not cfg.model.name:
        try:
            before = run_config(cfg.run, cfg.results_dir).model.name
        except (UserError, ValueError):  # a new run, or settings of another version
            before = None
    return resolve_model_name(cfg, get_harness(cfg.harness.name).needs_model, before)


def _unset(name: str | None) -> bool:
    return bool(name) and not os.environ.get(name, "").strip()


def _check_model(cfg: Config, errors: Collector, on_host: bool = False) -> None:
    from ..sandbox import provider_class, proxy_address

    model = cfg.model
    with errors.check():
        if not model.base_url:
            how = (f"export {model.base_url_env}=http://host:8000/v1 (named by model.base_url_env)"
                   if model.base_url_env
                   else "give the OpenAI-compatible endpoint, e.g. http://host:8000/v1, or export OPENAI_BASE_URL")
            raise UserError(f"model.base_url: harness {cfg.harness.name!r} talks to a model but none is set; {how}")
    with errors.check():
        if _unset(model.api_key_env):
            raise UserError(f"model.api_key_env: the environment variable {model.api_key_env} is not set; export "
                            "it with the model endpoint's API key, or set model.api_key_env: null for an endpoint "
                            "without one")
    # an agent on this host needs no address the sandboxes reach; one in a sandbox service
    # whose address is missing (reported above) has none to derive it from yet
    provider = provider_class(cfg.sandbox.provider)
    service_known = provider.proxy_hosts[1] is not None or bool(provider.service(cfg.sandbox.options()))
    with errors.check():
        if model.proxy.enabled and not on_host and service_known:
            proxy_address(cfg.sandbox, model.proxy)


def check_images(cfg: Config, tasks: Callable[[], Iterable[Task]]) -> None:
    """A provider that runs images needs one for every task (the task's, or sandbox.default_image)."""
    from ..sandbox import provider_class

    if not provider_class(cfg.sandbox.provider).needs_image or cfg.sandbox.default_image:
        return
    for task in tasks():
        if not task.image:
            raise UserError(f"sandbox.default_image: task {task.instance_id} of {cfg.benchmark.tasks} names no image "
                            f"and provider {cfg.sandbox.provider} needs one; set sandbox.default_image")


def preflight(cfg: Config, tasks: Iterable[Task], sources: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> None:
    """What a run needs from outside, asked before anything is created; UserError (one line
    naming the config source, the key and the fix) at the first that fails:

    - the model endpoint answers its model list, through the proxy's client with its
      headers and key, and serves model.name (a harness that talks to a model);
    - what the harness needs to know from it (pool: its context window);
    - the sandbox provider's service answers and takes its key, and every image the tasks
      need is on it or can be pulled under its pull policy (the provider's own preflight).
    """
    import asyncio

    from ..harness import get_harness
    from ..sandbox import get_provider, rewrite_image
    from ..sandbox.base import ImageUnavailable

    try:
        harness = get_harness(cfg.harness.name)
        if harness.needs_model:
            from ..proxy.served import check_served

            check_served(cfg.model)
            harness.check_model(harness.options_of(cfg.harness.config), cfg.model)
        origin: dict[str, str] = {}  # image -> the setting that names it
        for task in tasks:
            named = task.image or cfg.sandbox.default_image
            if named:
                image = rewrite_image(named, cfg.sandbox.image_rewrites)
                origin.setdefault(image, "sandbox.image_rewrites" if image != named else
                                  "benchmark.tasks" if task.image else "sandbox.default_image")

        async def ask() -> None:
            async with get_provider(cfg.sandbox) as provider:
                await provider.preflight(sorted(origin))

        try:
            asyncio.run(ask())
        except ImageUnavailable as exc:
            raise UserError(exc.detail, exc.key or origin[exc.image]) from None
    except UserError as exc:
        raise located(exc, sources, cfg) from None


def located(exc: UserError, sources: Sequence[tuple[str, Mapping[str, Any]]], cfg: Config | None = None) -> UserError:
    """`exc` with the config source that sets its key (or the variable the value came from)
    before the key; as it is when it names no key (its message then names what it is about)."""
    if exc.key is None:
        return exc
    where = (base_url_source(cfg.model.model_dump(), sources) if exc.key == "model.base_url" and cfg is not None
             else f"{source_of(exc.key.split('.'), sources)}: {exc.key}")
    return UserError(f"{where}: {exc.detail}")


def preflight_or_exit(cfg: Config) -> None:
    """preflight when a real run starts (a plan asks nothing): a user error exits in one line."""
    try:
        preflight(cfg, (read_task(cfg.benchmark, ref) for ref in select_tasks(cfg.benchmark)), _SOURCES)
    except UserError as exc:
        print(f"sandbatch: error: {exc}", file=sys.stderr)
        sys.exit(1)


# Settings that change no rollout's outcome: the run's name and place, how much of the benchmark
# it takes (the aggregate's selection, below), how fast and how often it goes, what it traces.
# Grading and the aggregate have stamps of their own.
_NOT_AGENT = ("run", "results_dir", "repeats", "retries", "concurrency", "nodes", "traces", "grading", "aggregate")
_SELECTION = ("limit", "instance_ids", "filter")
# within model and its proxy: the variables' names (their values are resolved into the keys beside
# them), where the proxy listens and how it paces retries of an upstream that failed
_MODEL_PLUMBING = ("base_url_env", "name_env", "api_key_env")
_PROXY_PLUMBING = ("bind_host", "advertise_host", "port", "retries", "backoff", "backoff_max", "retry_budget",
                   "connect_timeout")
# within sandbox: where sandboxes live and how they are reached, paced and labelled; registry
# rewrites name mirrors of the same images. Only the selected provider's own options count,
# less its plumbing (Provider.plumbing).
_SANDBOX_PLUMBING = ("ttl_seconds", "owner", "image_rewrites", "create_rate")


def _without(section: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    return {k: v for k, v in section.items() if k not in keys}


def agent_settings(raw: dict[str, Any]) -> dict[str, Any]:
    """What a rollout's agent run depends on: the task set's definition, the harness, the model,
    the selected sandbox provider, the agent's timeouts and the patch's extraction (the agent's
    sandbox is gone once the patch is out, so a new patch needs a new agent run)."""
    from ..sandbox import provider_class

    out = _without(raw, _NOT_AGENT)
    out["benchmark"] = _without(raw["benchmark"], _SELECTION)
    model = _without(raw["model"], _MODEL_PLUMBING)
    out["model"] = {**model, "proxy": _without(model["proxy"], _PROXY_PLUMBING)}
    sandbox = raw["sandbox"]
    provider = sandbox["provider"]
    out["sandbox"] = {**{k: v for k, v in _without(sandbox, _SANDBOX_PLUMBING).items() if not isinstance(v, dict)},
                      provider: _without(sandbox.get(provider) or {}, provider_class(provider).plumbing)}
    out["timeouts"] = _without(raw["timeouts"], ("grade",))
    return out


def stamps(raw: dict[str, Any], rollouts: Iterable[str]) -> dict[str, str]:
    """Per-stage settings as canonical JSON: a stage reruns exactly when its stamp changes.

    The `settings` rule (workflow/rules/common.smk) writes each one when its content changes
    (Snakemake's params trigger), so only the stages downstream of a changed stamp are redone:
    `agent` (an input of the sandbox step, whose output the rest of the rollout reads),
    `grade` (grading from the saved patch) and `aggregate` (its settings and the rollouts it
    sums up, by their digest: a selection that drops rollouts is aggregated again).
    `run` is the whole config, which the steps read: written outside the DAG (write_run_settings).
    """
    dump = lambda obj: json.dumps(obj, sort_keys=True, separators=(",", ":"))  # noqa: E731
    names = list(rollouts)
    selection = hashlib.sha256("\n".join(names).encode()).hexdigest()
    return {
        "run": dump(raw),
        "agent": dump(agent_settings(raw)),
        "grade": dump({"grading": raw["grading"], "timeout": raw["timeouts"]["grade"]}),
        "aggregate": dump({"aggregate": raw["aggregate"], "rollouts": len(names), "selection_sha256": selection}),
    }


_pending: dict[str, str] = {}  # path -> the settings a run that executes jobs writes at its start


def write_run_settings(workflow, path: str, content: str) -> None:
    """The config as it is now in `path` (the steps' --config), for a run that executes jobs;
    written by start_run_settings when the run starts, after its preflight (so a run the
    preflight refuses leaves nothing behind) and before any job; rewritten only when it
    changed. Called from an input function of every rule (the settings are known whatever the
    target): it is no input file of any job, so that a rewrite never holds back the jobs a
    changed config adds (Snakemake 9.27 skips the jobs downstream of a job it reruns when they
    read its output as ancient(): the missing rollouts of a raised `repeats` with them)."""
    if executes_jobs(workflow):
        _pending.setdefault(path, content)


def start_run_settings() -> None:
    """Write what write_run_settings noted (the workflow's onstart, after the preflight)."""
    for path, content in _pending.items():
        write_if_changed(path, content + "\n")
    _pending.clear()


def sandboxes_at_once(cfg: Config, spawned: bool = False) -> int:
    """The run's `sandboxes` resource: `concurrency` x `nodes`, lowered (with a note) to what this
    host's open-files and process limits hold; a job's own Snakemake (spawned: remote, or a
    script job's) runs what the run's Snakemake gave it."""
    wanted = cfg.concurrency * cfg.nodes
    if spawned:
        return wanted
    from .capacity import rollouts_at_once

    held, why = rollouts_at_once(wanted)
    if why:
        print(f"sandbatch: {held} rollouts at once, not {wanted} (concurrency): this host's {why} holds no more; "
              f"the others wait for a free slot", file=sys.stderr)
    return held


def reaped_since(run_dir: str | os.PathLike, since: float) -> bool:
    """Whether an aggregate that finished after `since` (a time.time()) reaped the run's sandboxes
    (sandbatch.steps.aggregate): the end of that run then need not list them again."""
    path = Path(run_dir) / MANIFEST
    try:
        return (path.stat().st_mtime >= since
                and Manifest.model_validate_json(path.read_text()).sandboxes_reaped is not None)
    except (OSError, ValueError):  # a pydantic ValidationError is a ValueError
        return False


def end_summary(cfg: Config, since: float, success: bool, in_workflow: bool = True) -> list[str]:
    """The run's last lines (sandbatch.reporting.summary) when a run's Snakemake ends: those of
    the aggregate it wrote (after `since`, a time.time()), or (in_workflow: at the workflow's
    end) why there is none. The workflow's end leaves them to its caller when SUMMARY_BY_CALLER
    is set (`sandbatch run` prints them after Snakemake exits, with in_workflow=False)."""
    from ..reporting.summary import summary_lines

    if in_workflow and os.environ.get(SUMMARY_BY_CALLER):
        return []
    metrics = cfg.run_dir / "metrics.json"
    try:
        fresh = metrics.stat().st_mtime >= since
    except OSError:
        fresh = False
    if fresh or success:
        return summary_lines(cfg.run_dir, cfg.run)
    if not in_workflow:
        return []
    return [f"sandbatch: run {cfg.run}: the aggregate did not run (a step failed: see the FAILED lines above, "
            f"`sandbatch status {cfg.run}`); the same command retries what is missing"]


def exit_if_graded_nothing(cfg: Config) -> None:
    """End of a successful run: when every rollout ended in an infrastructure error the run
    failed, though every job did its part (the report, written, says why on its first lines).
    Exits 1 with one line naming the failure classes; a run that graded anything goes on."""
    path = cfg.run_dir / "metrics.json"
    try:
        m = Metrics.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # no aggregate in this invocation's target
        return
    if m.graded_nothing:
        classes = ", ".join(f"{k} {v}" for k, v in sorted(m.failure_classes.items())) or "no class recorded"
        print(f"sandbatch: error: run {cfg.run} graded nothing: all {m.rollouts} rollouts ended in an "
              f"infrastructure error ({classes}); see {cfg.run_dir / 'report.md'}", file=sys.stderr)
        sys.exit(1)
