"""Run configuration: the JSON Schema in schemas/ holds keys and defaults, pydantic the types.

The schema is the single source of defaults (filled in by validation); the pydantic
models declare no defaults of their own, so the two cannot drift apart silently
(tests/test_config.py checks that they name the same keys). The schema's provider blocks
are generated from the providers' option models (sandbatch.ops.reference); a harness's
options are resolved over its own model where the run is checked (ops.workflow.check_run).
"""

from __future__ import annotations

import copy
import functools
import os
import string
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from . import resources
from .errors import UserError
from .util import deep_merge, did_you_mean


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Resources(_Model):
    cpu: str | None = None
    memory: str | None = None
    disk: str | None = None


class BenchmarkConfig(_Model):
    kind: str
    tasks: str
    limit: int | None
    instance_ids: list[str]
    filter: str | None
    prompt_template: str | None
    resources: Resources
    repo_resources: dict[str, Resources]
    task_timeouts: bool


class HarnessConfig(_Model):
    name: str
    version: str | None
    config: dict[str, Any]


class ProxyConfig(_Model):
    enabled: bool
    bind_host: str | None
    advertise_host: str | None
    port: int
    retries: int
    backoff: float
    backoff_max: float
    retry_budget: float
    connect_timeout: float
    read_timeout: float | None
    stop_after_failures: int
    max_calls: int | None
    max_tokens: int | None
    cap_status: int
    force_model_name: bool
    stream_usage: bool
    require_agent_key: bool
    drop_cache_control: bool
    messages: str
    responses: str
    tokenize_url: str | None
    extra_body: dict[str, Any]


class Prices(_Model):
    """model.prices: per million tokens."""

    input: float
    output: float


class ModelConfig(_Model):
    base_url: str | None
    base_url_env: str | None
    name: str | None
    name_env: str | None
    api_key_env: str | None
    sampling: dict[str, Any]
    tokens: Literal["auto", "on", "off"]
    proxy: ProxyConfig
    prices: "Prices | None"

    def upstream_key(self) -> str | None:
        """The endpoint's API key, read when needed and never stored: the variable api_key_env
        names, else OPENAI_API_KEY when the config names no variable (docs/running.md)."""
        return os.environ.get(self.api_key_env or OPENAI_API_KEY, "").strip() or None


class ImageRewrite(_Model):
    prefix: str
    replace: str


class SandboxConfig(_Model):
    model_config = ConfigDict(extra="allow", frozen=True)  # one options block per provider
    provider: str
    ttl_seconds: int
    default_image: str | None
    owner: str | None
    image_rewrites: list[ImageRewrite]
    create_rate: float
    history: Literal["strip", "keep"]

    def options(self, provider: str | None = None) -> dict[str, Any]:
        """The options block of `provider` (default: the selected one)."""
        return dict((self.model_extra or {}).get(provider or self.provider) or {})


class Timeouts(_Model):
    sandbox: float
    install: float
    agent: float
    patch: float
    grade: float


class GradingConfig(_Model):
    reward_threshold: float
    in_agent_sandbox: bool | list[str]
    inconclusive_retries: int
    tampering: Literal["neutralise", "fail", "log_only"]
    suspicious: Literal["report", "fail"]


class PatchConfig(_Model):
    exclude: list[str]


class AggregateConfig(_Model):
    report_title: str | None
    compare_to: str | None
    exports: list[Literal["gym"]]


class TracesConfig(_Model):
    exporters: list[Literal["file", "otlp_http", "otlp_grpc"]]
    endpoint: str | None
    export_timeout: float


class Config(_Model):
    run: str
    results_dir: str
    repeats: int
    retries: int
    concurrency: int
    nodes: int
    benchmark: BenchmarkConfig
    harness: HarnessConfig
    model: ModelConfig
    sandbox: SandboxConfig
    timeouts: Timeouts
    patch: PatchConfig
    grading: GradingConfig
    aggregate: AggregateConfig
    traces: TracesConfig

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


def merged_sources(
    configfiles: Sequence[str | os.PathLike],
    overrides: Mapping[str, Any] | None = None,
    default: str | os.PathLike | None = None,
    overrides_label: str = "--config",
) -> tuple[dict[str, Any], list[tuple[str, Mapping[str, Any]]]]:
    """Merge like Snakemake does (default file, then each --configfile, then --config):
    the merged config and its sources, lowest precedence first."""
    sources: list[tuple[str, Mapping[str, Any]]] = []
    merged: dict[str, Any] = {}
    for path in ([default] if default else []) + list(configfiles):
        raw = read_yaml(path)
        sources.append((str(path), raw))
        merged = deep_merge(merged, raw)
    if overrides:
        sources.append((overrides_label, overrides))
        merged = deep_merge(merged, overrides)
    return merged, sources


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

