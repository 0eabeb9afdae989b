"""Run configuration: the pydantic models below hold every key, its type, default and meaning.

The JSON Schema in schemas/ is written from them (with each provider's options model and the
registries' names: sandbatch.ops.reference; tests/test_reference.py keeps it so). The schema
validates a merged config, fills in its defaults and gives the one-line errors (jsonschema's
errors name the key and what it takes, and editors read the same file); the models then read
the filled config as typed attributes. A harness's options are resolved over its own model
where the run is checked (ops.workflow.check_run).
"""

from __future__ import annotations

import copy
import functools
import os
import string
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from . import resources
from .errors import UserError
from .util import deep_merge, did_you_mean


class _Model(BaseModel):
    # validate_default: a default written as the schema shows it (30 for a number) is read as
    # the field's type (30.0), as the same value given in a config file is
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class Resources(_Model):
    """Sandbox resources of every task unless the task (task.toml) or repo_resources says otherwise."""

    cpu: str | None = Field(None, description='CPUs, e.g. "2".')
    memory: str | None = Field(None, description='Memory, e.g. "4Gi".')
    disk: str | None = Field(None, description='Disk, e.g. "20Gi".')


class BenchmarkConfig(_Model):
    kind: Literal['smoke', 'swebench', 'swebench_multilingual', 'swebench_pro', 'terminal_bench'] = Field(
        'smoke', description=(
            'Task format and grader family. smoke - the bundled tasks; swebench - SWE-bench Verified rows '
            '(classic or self-describing); swebench_multilingual - the same row format over 9 languages; '
            'swebench_pro - SWE-bench Pro rows; terminal_bench - a directory of Terminal-Bench 2.x task '
            'directories.'))
    tasks: str = Field('data/smoke/tasks.jsonl', description=(
        'Path of the task file (JSONL) or, for terminal_bench, of the directory of task directories; '
        'relative to the working directory.'))
    prompt_template: str | None = Field(None, description=(
        "What the agent is asked, with {placeholders} - prompt (the family's default: problem_statement; "
        'Pro adds requirements and interface; Terminal-Bench is instruction.md), problem_statement, '
        'requirements, interface, instance_id, repo, workdir. Literal braces are doubled. null = '
        '{prompt}.'))
    resources: Resources = Field(default_factory=Resources, description=(
        'Sandbox resources of every task unless the task (task.toml) or repo_resources says otherwise.'))
    repo_resources: dict[str, Resources] = Field(default_factory=dict, description=(
        'Per-repo resource overrides (repo as in the rows, e.g. "apache/druid"); they win over everything '
        'else.'))
    task_timeouts: bool = Field(True, description=(
        "Use the task's own agent and verifier timeouts (Terminal-Bench task.toml) instead of "
        'timeouts.agent and timeouts.grade for that task.'))
    limit: int | None = Field(None, ge=1, description='Keep only the first N tasks after filtering.')
    instance_ids: list[str] = Field(default_factory=list, description='Keep only these instance ids (empty = all).')
    filter: str | None = Field(None, description='Keep only instance ids matching this regular expression.')


class HarnessConfig(_Model):
    # the names come from the registry (sandbatch.harness.HARNESSES), which the schema lists
    name: str = Field('oracle', description='Harness name.')
    version: str | None = Field(None, description=(
        "Harness version to install (null = the harness's pinned default)."))
    # the harness's own options model (Harness.options) takes it where the run is checked
    config: dict[str, Any] = Field(default_factory=dict, description=(
        "Deep-merged over the harness's full default config."))


class ProxyConfig(_Model):
    enabled: bool = Field(True, description=(
        'Run the proxy; false points the agent straight at base_url (no usage records, overrides or caps) '
        "for sandboxes that cannot reach the job's host."))
    bind_host: str | None = Field(None, description=(
        "Address the proxy listens on; null = the sandbox provider's default (127.0.0.1 for local, "
        '0.0.0.0 for providers whose sandboxes are other hosts).'))
    advertise_host: str | None = Field(None, description=(
        "Host name or address the sandbox uses to reach the proxy; null = the provider's default "
        "(127.0.0.1 for local, host.docker.internal for docker; for opensandbox, this host's source "
        'address on its route toward the OpenSandbox server).'))
    port: int = Field(0, ge=0, le=65535, description='TCP port of the proxy; 0 picks a free one per rollout.')
    retries: int = Field(6, ge=0, description=(
        'Extra attempts for an upstream connect error, dropped connection, 429, 502 or 503; other '
        'statuses go back to the agent at once.'))
    backoff: float = Field(1.0, ge=0, description=(
        'Seconds before the first retry; doubles per retry (jittered), up to backoff_max.'))
    backoff_max: float = Field(30, ge=0, description='Longest pause between two attempts, in seconds.')
    retry_budget: float = Field(120, ge=0, description=(
        'Seconds one call may spend in retries; no attempt starts after it (a Retry-After beyond it '
        'returns the 429). An unreachable upstream answers the agent within about retry_budget + '
        'connect_timeout.'))
    connect_timeout: float = Field(10, gt=0, description='Seconds to open a connection to the upstream.')
    read_timeout: float | None = Field(1800, gt=0, description=(
        'Seconds the upstream may stay silent (before its answer or between stream chunks); null waits '
        'forever. A timeout is not retried (the call may be running).'))
    stop_after_failures: int = Field(3, ge=0, description=(
        "Model calls in a row that failed for the endpoint's reasons (unreachable, 5xx or 429 after the "
        'retries above, 401/403, 404) after which the harness step stops the agent and records the '
        'rollout as an infra_error of that class, instead of letting the agent wait out its timeout; 0 '
        'never stops it early (docs/proxy.md).'))
    max_calls: int | None = Field(None, ge=0, description=(
        'Per-rollout cap on model calls; further calls are answered with an error naming this cap instead '
        'of being forwarded (null = no cap).'))
    max_tokens: int | None = Field(None, ge=0, description=(
        'Per-rollout cap on total tokens (prompt + completion, summed over calls); once reached, further '
        'calls are refused like max_calls (null = no cap).'))
    cap_status: Literal[400, 429] = Field(400, description=(
        'HTTP status of a refused call: 400 makes agents stop; 429 makes most agents retry (and be '
        'refused again) until their own retry limit.'))
    force_model_name: bool = Field(False, description='Replace the model the agent asks for with model.name.')
    stream_usage: bool = Field(True, description=(
        'Add stream_options.include_usage to streamed Chat calls so they report usage (an extra final '
        'chunk with empty choices).'))
    require_agent_key: bool = Field(True, description=(
        "Answer only requests carrying the proxy's per-rollout agent key (which the harness gives the "
        'agent as its API key), so a proxy bound to 0.0.0.0 does not lend the upstream key to other '
        'hosts.'))
    drop_cache_control: bool = Field(True, description=(
        'Remove cache_control at messages[].content[] and tools[] (strict OpenAI servers reject it); '
        "never inside a tool's parameter schema."))
    messages: Literal['translate', 'passthrough'] = Field('translate', description=(
        'What the proxy does with Anthropic Messages calls (POST /v1/messages, as Claude Code makes '
        'them): translate (each becomes one Chat Completions call to base_url, token ids recorded as for '
        "Chat; docs/proxy.md) or passthrough (sent to base_url's /messages as they are, for an upstream "
        'that serves Messages; usage is recorded, token ids are not).'))
    responses: Literal['passthrough', 'translate'] = Field('passthrough', description=(
        'What the proxy does with Responses calls (POST /v1/responses, as Codex makes them): passthrough '
        "(sent to base_url's /responses as they are; vLLM's answers carry token ids for the message text "
        'only) or translate (each becomes one Chat Completions call to base_url and its answer a '
        'Responses answer, so the ids of the reasoning and tool calls a turn generated are recorded too; '
        'docs/proxy.md).'))
    tokenize_url: str | None = Field(None, pattern='^https?://', description=(
        "A tokenizer endpoint of the upstream (vLLM's /tokenize, e.g. http://host:8000/tokenize) that "
        "counts a chat's tokens with the served model's own chat template; the proxy answers Messages "
        'count_tokens calls with it. null - an estimate (about four characters a token), as also when the '
        'endpoint fails (the record says which).'))
    extra_body: dict[str, Any] = Field(default_factory=dict, description=(
        'Fields set on every model call body after sampling (same merge rules), for backend-specific '
        'switches.'))


class Prices(_Model):
    """model.prices: per million tokens."""

    input: float = Field(ge=0, description='Price per million input tokens.')
    output: float = Field(ge=0, description='Price per million output tokens.')


class ModelConfig(_Model):
    base_url: str | None = Field(None, description=(
        'Base URL of the OpenAI-compatible API, ending in /v1. null: OPENAI_BASE_URL when base_url_env is '
        'not set either (docs/running.md, "The model endpoint").'))
    base_url_env: str | None = Field(None, description=(
        'Name of an environment variable that, when set and non-empty, replaces base_url (one config file '
        'serves several sites).'))
    name: str | None = Field(None, description=(
        'Model id sent to the endpoint; also model_name_or_path in predictions. null: the one model the '
        "endpoint's /models lists, asked once when the run is planned (several, or none, or no answer: an "
        'error before anything starts); a harness without a model records "none". The run\'s settings and '
        'manifest.json hold the name used.'))
    name_env: str | None = Field(None, description=(
        'Name of an environment variable that, when set and non-empty, replaces name.'))
    api_key_env: str | None = Field(None, description=(
        'Name of the environment variable holding the upstream API key (never stored), sent as '
        'Authorization: Bearer. null: OPENAI_API_KEY when set.'))
    sampling: dict[str, Any] = Field(default_factory=dict, description=(
        'Sampling parameters the proxy sets on every model call, winning over what the agent sent '
        '(temperature, top_p, max_tokens, chat_template_kwargs: {enable_thinking: false}, ...). The '
        'output-token limit may be given as max_tokens, max_completion_tokens or max_output_tokens and is '
        'sent under the name the endpoint uses; mappings merge key by key; null removes the key.'))
    tokens: Literal['auto', 'on', 'off'] = Field('auto', description=(
        'Token ids and logprobs of every model call, for training. on - the proxy asks the upstream for '
        'them (Chat Completions: logprobs, return_token_ids; Responses: the output_text logprobs include '
        'and return_token_ids; a streamed call whose stream carries none - Responses, or Chat once a '
        'stream came without them - is made unstreamed upstream and streamed back) and records them; auto '
        '- records them when the upstream sends them; off - records none. Recorded tokens go to '
        'model_calls.jsonl (prompts as deltas) and onto the output items of response.json. on needs '
        'model.proxy.enabled.'))
    prices: Prices | None = Field(None, description=(
        "What the model's tokens cost, per million input (cached ones included) and per million output "
        'tokens, e.g. {input: 3, output: 15} in US dollars; metrics.json and the report then show the '
        "run's cost. null - no cost is reported."))
    proxy: ProxyConfig = Field(default_factory=ProxyConfig, description=(
        'The per-rollout model proxy the harness job runs: the agent talks to it, it talks to base_url '
        '(retries, sampling overrides, usage records in model_calls.jsonl).'))

    def upstream_key(self) -> str | None:
        """The endpoint's API key, read when needed and never stored: the variable api_key_env
        names, else OPENAI_API_KEY when the config names no variable (docs/running.md)."""
        return os.environ.get(self.api_key_env or OPENAI_API_KEY, "").strip() or None


class ImageRewrite(_Model):
    prefix: str = Field(description='What an image name starts with.')
    replace: str = Field(description='What that start is replaced by.')


class SandboxConfig(_Model):
    # one options block per provider besides these fields: the schema names them from the
    # registry (sandbatch.sandbox.PROVIDERS), each provider's options model gives its keys
    model_config = ConfigDict(extra="allow", frozen=True, validate_default=True)
    __pydantic_extra__: dict[str, dict[str, Any]]

    # the names come from the registry, which the schema lists
    provider: str = Field('local', description='Sandbox provider.')
    ttl_seconds: int = Field(7200, ge=60, description='Lifetime after which a provider may delete a forgotten sandbox.')
    default_image: str | None = Field(None, description=(
        'Image for tasks that name none (the bundled smoke tasks); ignored by the local provider.'))
    owner: str | None = Field(None, description='Owner label put on every sandbox (null = the current user name).')
    create_rate: float = Field(5, gt=0, description=(
        'Sandbox creates per second across the whole run (every step process, locally and on Slurm, draws '
        'from one bucket in the run directory); 429/503 answers slow it down.'))
    history: Literal['strip', 'keep'] = Field('strip', description=(
        "strip = before the agent starts, its sandbox's repository (when it comes with the task image, "
        'submodules included) keeps only what HEAD reaches: no other branch, tag, remote, reflog, stash, '
        'note or object from after the base commit (what was removed is recorded in sandbox.json, '
        "history). keep = leave the image's repository as it is (for images known to be clean). The "
        'grading sandbox always keeps it.'))
    image_rewrites: list[ImageRewrite] = Field(default_factory=list, description=(
        'Image name prefix rewrites; the first matching prefix wins.'))

    def options(self, provider: str | None = None) -> dict[str, Any]:
        """The options block of `provider` (default: the selected one)."""
        return dict((self.model_extra or {}).get(provider or self.provider) or {})


class Timeouts(_Model):
    sandbox: float = Field(600, gt=0, description='Create and prepare a sandbox.')
    install: float = Field(600, gt=0, description='Install the harness.')
    agent: float = Field(1800, gt=0, description='Run the agent.')
    patch: float = Field(300, gt=0, description='Extract the patch.')
    grade: float = Field(1800, gt=0, description='Grade in a fresh sandbox.')


class GradingConfig(_Model):
    reward_threshold: float = Field(1.0, description=(
        'A rollout counts as correct for pass@k when reward >= this value.'))
    in_agent_sandbox: bool | list[str] = Field(False, description=(
        "Terminal-Bench only. Grade in the agent's own sandbox (its full state, not only the replayed "
        'workdir diff) - true for every task, or a list of instance ids. Every reward file is deleted '
        'before tests/ is uploaded.'))
    inconclusive_retries: int = Field(1, ge=0, description=(
        'SWE-bench Pro. Reruns of run_script + parser when a run is inconclusive (no parsable '
        'output.json, no tests, timed out) before it counts as unresolved.'))
    tampering: Literal['neutralise', 'fail', 'log_only'] = Field('neutralise', description=(
        'What grading does with the parts of a patch that change how tests are collected, run or reported '
        '(test files, conftest.py, runner configs, .pth files, shims; see docs/benchmarks.md), and with a '
        'test run whose verdict the code under test altered (a pytest report contradicting the raw call '
        "result, the runner's machinery replaced, a log that contradicts itself): neutralise = restore "
        'those paths to the base commit, grade the code change alone and count altered results as failed; '
        'fail = reward 0 and status tampered. Either way grade.json lists them under tampering. log_only '
        "= none of these defences: the log alone decides, as in the benchmarks' own harnesses (to measure "
        'what the defences change; never for rewards used in training).'))
    suspicious: Literal['report', 'fail'] = Field('report', description=(
        'What grading does with a patch whose code outside the tests reaches into the test runner '
        "(imports _pytest or pluggy, defines pytest hooks, looks up the runner's sys.modules entry, "
        'patches builtins, exits at import, and the equivalents for the other languages; see '
        'docs/benchmarks.md): report = grade it as usual and list the lines under suspicious in '
        'grade.json (counted in the report and the viewer); fail = reward 0 and status tampered (failure '
        'class suspicious), the tests not run.'))


class AggregateConfig(_Model):
    report_title: str | None = Field(None, description='Title of report.md (null = the run name).')
    compare_to: str | None = Field(None, description=(
        'Name of an earlier run under the same results_dir (its aggregate done) that the report compares '
        'this run with, as `sandbatch compare <compare_to> <run>` does: resolved rate and pass@k with '
        'bootstrap intervals, paired difference, McNemar test, flipped and flaky tasks '
        '(report/compare.html). null = no comparison.'))
    exports: list[Literal['gym']] = Field(default_factory=list, json_schema_extra={"uniqueItems": True}, description=(
        'Layouts of the finished run that the workflow writes after the aggregate, as `sandbatch export '
        "--format <name>` does. gym = NeMo Gym's: results/<run>/gym/ holds rollouts.jsonl, "
        'rollouts_materialized_inputs.jsonl and rollouts_failures.jsonl as `gym eval run` writes them, '
        'read unchanged by `gym eval profile`.'))


class PatchConfig(_Model):
    exclude: list[str] = Field(default_factory=lambda: ['**/__pycache__/**', '**/*.pyc', '.pytest_cache/**'],
                               description='Git pathspec globs left out of the patch (build and harness state).')


class TracesConfig(_Model):
    exporters: list[Literal['file', 'otlp_http', 'otlp_grpc']] = Field(
        default_factory=list, json_schema_extra={"uniqueItems": True}, description=(
            'Where spans go: `file` appends OTLP-JSON lines to results/<run>/<task>/<repeat>/trace.jsonl; '
            '`otlp_http` / `otlp_grpc` send them to a collector (Phoenix, Jaeger, an OpenTelemetry '
            'Collector) named by `endpoint` or the standard OTEL_EXPORTER_OTLP_* variables.'))
    endpoint: str | None = Field(None, description=(
        "The collector's URL (e.g. http://127.0.0.1:6006/v1/traces for HTTP, http://127.0.0.1:4317 for "
        'gRPC); null reads OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT.'))
    export_timeout: float = Field(2, gt=0, description=(
        'Seconds one export to a collector may take, and the most a step waits at its end for its last '
        'spans to go; past it they are dropped (counted in metrics.json) and the rollout goes on. A '
        'collector that is down costs each step at most this once.'))


class Config(_Model):
    """One run = one benchmark x one harness x one model. Every key has a default, so a config
    file only names what it changes. Unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, title="sandbatch run configuration")

    run: str = Field('default', pattern='^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$', description=(
        'Name of the run; results go to results/<run>/. Put what defines an experiment here.'))
    results_dir: str = Field('results', description=(
        'Directory (relative to the working directory) that holds results/<run>/.'))
    repeats: int = Field(1, ge=1, description=(
        'Rollouts per task; pass@k is reported for every k = 1, 2, 3, ... up to repeats.'))
    retries: int = Field(2, ge=0, description=(
        'Extra attempts for a step that failed on infrastructure (sandbox, image, network, grader crash); '
        'after the last one the failure is recorded as infra_error.'))
    concurrency: int = Field(4, ge=1, description=(
        "Rollouts that may hold a sandbox at the same time, per node's worth of sandbox capacity: the "
        "run's cap (Snakemake resource `sandboxes`) is concurrency x nodes."))
    nodes: int = Field(1, ge=1, description=(
        'A multiplier of the sandbox cap, nothing more: at most concurrency x nodes rollouts hold a '
        'sandbox at once. It starts no jobs and places none; the executor (local or Slurm) decides where '
        'steps run.'))
    benchmark: BenchmarkConfig = Field(default_factory=BenchmarkConfig, description='Which tasks to run.')
    harness: HarnessConfig = Field(default_factory=HarnessConfig, description=(
        'The agent harness that runs in the sandbox.'))
    model: ModelConfig = Field(default_factory=ModelConfig, description=(
        'The OpenAI-compatible model endpoint the agent talks to.'))
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description='Where rollouts run.')
    timeouts: Timeouts = Field(default_factory=Timeouts, description='Wall-clock limits in seconds per phase.')
    grading: GradingConfig = Field(default_factory=GradingConfig, description='How patches are graded.')
    aggregate: AggregateConfig = Field(default_factory=AggregateConfig, description='What the aggregate reports.')
    patch: PatchConfig = Field(default_factory=PatchConfig, description=(
        "How the agent's patch is extracted from the workdir."))
    traces: TracesConfig = Field(default_factory=TracesConfig, description=(
        'OpenTelemetry traces: one trace per rollout (its steps, sandbox operations, model calls). Off '
        'unless `exporters` names one; off costs nothing.'))

    @property
    def run_dir(self) -> Path:
        return Path(self.results_dir) / self.run


@functools.cache
def load_schema(name: str = "config.schema.yaml") -> dict[str, Any]:
    import yaml  # not at module level: every step job imports this module, few need YAML

    with open(resources.schema(name), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


# --- validation -------------------------------------------------------------------------

def _validator_with_defaults():
    from jsonschema import Draft202012Validator, validators

    base_properties = Draft202012Validator.VALIDATORS["properties"]

    def properties(validator, props, instance, schema):
        if isinstance(instance, dict):
            for key, sub in props.items():
                if isinstance(sub, dict) and "default" in sub and key not in instance:
                    instance[key] = copy.deepcopy(sub["default"])
        yield from base_properties(validator, props, instance, schema)

    return validators.extend(Draft202012Validator, {"properties": properties})


def _types_of(schema: Mapping[str, Any]) -> set[str]:
    t = schema.get("type", [])
    return {t} if isinstance(t, str) else set(t)


def coerce_strings(data: Any, schema: Mapping[str, Any]) -> Any:
    """Turn strings into the schema's types where the schema wants a non-string.

    Snakemake passes nested `--config` values as strings (`model={"sampling": ...}` gives
    "0.6"); a string is parsed as YAML only where the schema does not accept a string.
    A boolean where the schema wants one of "on"/"off" (YAML's unquoted on/off) is that word.
    """
    types = _types_of(schema)
    if isinstance(data, bool) and "boolean" not in types and {"on", "off"} <= set(schema.get("enum") or ()):
        return "on" if data else "off"  # YAML 1.1 reads an unquoted on/off as a boolean
    if isinstance(data, str) and types and "string" not in types:
        import yaml

        try:
            parsed = yaml.safe_load(data)
        except yaml.YAMLError:
            return data
        return coerce_strings(parsed, schema) if not isinstance(parsed, str) else data
    if isinstance(data, dict):
        props = schema.get("properties", {})
        return {k: coerce_strings(v, props.get(k, {})) for k, v in data.items()}
    if isinstance(data, list) and isinstance(schema.get("items"), dict):
        return [coerce_strings(v, schema["items"]) for v in data]
    return data


def _dotted(path: Sequence[Any]) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def source_of(path: Sequence[Any], sources: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """Name the last source (highest precedence) that sets `path`."""
    found = _source_set(path, sources)
    if found is not None:
        return found
    return sources[-1][0] if sources else "config"


def _source_set(path: Sequence[Any], sources: Sequence[tuple[str, Mapping[str, Any]]],
                skip_null: bool = False) -> str | None:
    """The last source that sets `path` (skip_null: to a value other than null), or None."""
    for label, raw in reversed(sources):
        node: Any = raw
        for part in path:
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and part < len(node):
                node = node[part]
            else:
                break
        else:
            if node is not None or not skip_null:
                return label
    return None


def _explain_schema_error(error) -> tuple[list[Any], str]:
    """(path of the offending key, one-line message) for a jsonschema error."""
    path = list(error.absolute_path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    v = error.validator
    if v == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        key = extra[0] if extra else "?"
        where = f" under {_dotted(path)}" if path else ""
        hint = did_you_mean(key, allowed)
        return path + [key], f"unknown key '{key}'{where}{hint}; allowed keys: {', '.join(allowed)}"
    if v == "enum":
        return path, f"{_dotted(path)}: {error.instance!r} is not allowed; choose one of: {', '.join(map(str, error.validator_value))}"
    if v == "type":
        want = error.validator_value if isinstance(error.validator_value, str) else " or ".join(error.validator_value)
        return path, f"{_dotted(path)}: {error.instance!r} has the wrong type; expected {want}"
    if v in ("minimum", "exclusiveMinimum"):
        op = ">=" if v == "minimum" else ">"
        return path, f"{_dotted(path)}: {error.instance!r} is too small; it must be {op} {error.validator_value}"
    if v == "pattern":
        return path, f"{_dotted(path)}: {error.instance!r} does not match the pattern {error.validator_value}"
    if v == "required":
        return path, f"{_dotted(path)}: {error.message}"
    return path, f"{_dotted(path)}: {error.message}"


def validate(
    data: Mapping[str, Any],
    sources: Sequence[tuple[str, Mapping[str, Any]]] = (),
    schema_name: str = "config.schema.yaml",
) -> dict[str, Any]:
    """Validate a merged config, fill in defaults, return it; UserError names the source."""
    schema = load_schema(schema_name)
    instance = coerce_strings(copy.deepcopy(dict(data)), schema)
    validator = _validator_with_defaults()(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: (len(e.absolute_path), str(e.absolute_path)))
    if errors:
        path, message = _explain_schema_error(errors[0])
        raise UserError(f"{source_of(path, sources)}: {message}")
    return instance


def parse(data: Mapping[str, Any], sources: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> Config:
    """Validate and build the typed config; checks the registries too (harness, provider, benchmark)."""
    filled = validate(data, sources)
    _apply_env(filled)
    _check_endpoint(filled["model"], sources)
    cfg = Config.model_validate(filled)
    _check_benchmark(cfg)
    return cfg


# the OpenAI clients' own variables: read when the config names no URL or key variable
OPENAI_BASE_URL, OPENAI_API_KEY = "OPENAI_BASE_URL", "OPENAI_API_KEY"


def _apply_env(filled: dict[str, Any]) -> None:
    """`*_env` keys: a set, non-empty environment variable replaces the value beside it
    (model.base_url, model.name; a sandbox service's sandbox.<provider>.connection.domain, whose
    variable may be a URL).
    OPENAI_BASE_URL gives model.base_url when the config names neither it nor base_url_env."""
    model = filled["model"]
    for key in ("base_url", "name"):
        name = model.get(f"{key}_env")
        if name and os.environ.get(name, "").strip():
            model[key] = os.environ[name].strip()
    if not model.get("base_url") and not model.get("base_url_env") and os.environ.get(OPENAI_BASE_URL, "").strip():
        model["base_url"] = os.environ[OPENAI_BASE_URL].strip()
    for options in filled["sandbox"].values():  # each provider's block; a remote service's has a connection
        conn = (options.get("connection") or {}) if isinstance(options, dict) else {}
        name = conn.get("domain_env") if isinstance(conn, dict) else None
        value = os.environ.get(name, "").strip() if name else ""
        if value:
            scheme, sep, rest = value.partition("://")
            if sep and scheme in ("http", "https"):
                conn["protocol"], value = scheme, rest
            conn["domain"] = value.rstrip("/")


def base_url_source(model: Mapping[str, Any], sources: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """Where model.base_url came from (_apply_env's order): a variable, or the config source that sets it."""
    name = model.get("base_url_env")
    if name and os.environ.get(name, "").strip():
        return f"{name} (named by model.base_url_env)"
    if _source_set(["model", "base_url"], sources, skip_null=True) is None and os.environ.get(OPENAI_BASE_URL, "").strip():
        return OPENAI_BASE_URL
    return f"{source_of(['model', 'base_url'], sources)}: model.base_url"


def _check_endpoint(model: Mapping[str, Any], sources: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
    """The endpoint's URL and request fields, as far as they can be checked offline (core.endpoint)."""
    from .endpoint import check_fields, check_url

    if model.get("base_url"):
        check_url(model["base_url"], base_url_source(model, sources))
    check_fields(model.get("sampling") or {}, f"{source_of(['model', 'sampling'], sources)}: model.sampling")


PLACEHOLDERS = ("prompt", "problem_statement", "requirements", "interface", "instance_id", "repo", "workdir")


def check_template(template: str | None) -> None:
    """UserError for a prompt template that names an unknown placeholder or is malformed."""
    if template is None:
        return
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise UserError(f"benchmark.prompt_template: {exc}; write literal braces as {{{{ and }}}}") from None
    for field in fields:
        if field not in PLACEHOLDERS:
            raise UserError(f"benchmark.prompt_template: unknown placeholder {{{field}}}; "
                            f"use one of: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}")


def _check_benchmark(cfg: "Config") -> None:
    check_template(cfg.benchmark.prompt_template)
    if cfg.model.tokens == "on" and not cfg.model.proxy.enabled:
        raise UserError("model.tokens: 'on' needs the model proxy, which asks the upstream for token ids; "
                        "set model.proxy.enabled: true or model.tokens: auto")
    if cfg.grading.in_agent_sandbox and cfg.benchmark.kind != "terminal_bench":
        raise UserError(f"grading.in_agent_sandbox: only Terminal-Bench tasks are graded in the agent's sandbox; "
                        f"remove it for benchmark.kind {cfg.benchmark.kind!r}")


# --- loading outside Snakemake (CLI, tests) ---------------------------------------------

def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    import yaml

    p = Path(path)
    if not p.is_file():
        raise UserError(f"{p}: config file not found; pass an existing YAML file")
    try:
        with open(p, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UserError(f"{p}:{where} is not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{p}: the top level must be a mapping of keys, not {type(data).__name__}")
    return data


def nest_dotted(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted keys as the nested mappings they name, in order: {"harness.name": "none"} is
    {"harness": {"name": "none"}} (the overrides NeMo Gym's and Hydra's users type)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        for part in reversed(key.split(".")):
            value = {part: value}
        out = deep_merge(out, value)
    return out


def merge(sources: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The config its sources give together, lowest precedence first: mappings merge key by
    key, anything else is replaced (as Snakemake merges its config files and --config)."""
    merged: dict[str, Any] = {}
    for _, raw in sources:
        merged = deep_merge(merged, raw)
    return merged


def merged_sources(
    configfiles: Sequence[str | os.PathLike],
    overrides: Mapping[str, Any] | None = None,
    default: str | os.PathLike | None = None,
    overrides_label: str = "--config",
) -> tuple[dict[str, Any], list[tuple[str, Mapping[str, Any]]]]:
    """Merge like Snakemake does (default file, then each --configfile, then --config):
    the merged config and its sources, lowest precedence first."""
    sources: list[tuple[str, Mapping[str, Any]]] = [
        (str(path), read_yaml(path)) for path in ([default] if default else []) + list(configfiles)]
    if overrides:
        sources.append((overrides_label, overrides))
    return merge(sources), sources


def load(
    configfiles: Sequence[str | os.PathLike],
    overrides: Mapping[str, Any] | None = None,
    default: str | os.PathLike | None = None,
) -> Config:
    """The validated config of merged files and overrides (merged_sources)."""
    return parse(*merged_sources(configfiles, overrides, default))


def run_config(run: str, results_dir: str | os.PathLike = "results",
               workdir: str | os.PathLike = ".") -> Config:
    """The validated config a run was started with (<workdir>/<results_dir>/<run>/_settings/run.json)."""
    path = Path(workdir) / results_dir / run / "_settings" / "run.json"
    if not path.is_file():
        raise UserError(f"{path}: no such run; pass the run name of a started run (see {results_dir}/)")
    return Config.model_validate_json(path.read_text(encoding="utf-8"))


def workflow_sources(workflow, config: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The config sources of a Snakemake run, lowest precedence first."""
    sources: list[tuple[str, Mapping[str, Any]]] = []
    cli_files = [str(p) for p in workflow.config_settings.configfiles]
    for path in workflow.configfiles:
        if str(path) not in cli_files:
            sources.append((_rel(path), read_yaml(path)))
    for path in cli_files:
        sources.append((_rel(path), read_yaml(path)))
    if workflow.config_settings.config:
        sources.append(("--config", dict(workflow.config_settings.config)))
    return sources or [("config", config)]


def _rel(path: str | os.PathLike) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)

