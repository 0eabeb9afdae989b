"""Every config in config/ validates and plans (`snakemake -n`) against fixture task files;
a Terminal-Bench run of the real workflow with the oracle harness scores every task
(gold validation), and its predictions.jsonl loads with the swebench package."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sandbatch import REPO_ROOT
from sandbatch.core import config
from sandbatch.sandbox import provider_class
from sandbatch.sandbox.local import default_root

FIX = REPO_ROOT / "tests" / "fixtures" / "bench"
CONFIGS = sorted((REPO_ROOT / "config").glob("*.yaml"))
FIXTURE_TASKS = {
    "smoke": REPO_ROOT / "data" / "smoke" / "tasks.jsonl",
    "swebench": FIX / "swebench_verified.jsonl",
    "swebench_multilingual": FIX / "swebench_multilingual.jsonl",
    "swebench_pro": FIX / "swe_pro" / "tasks.jsonl",
    "terminal_bench": FIX / "terminal_bench",
}
NAMED = ["lightning_swe_verified", "xs_swe_verified", "xs_swe_multilingual", "xs_swe_pro", "xs_terminal_bench"]
COMMENTED = set(NAMED) | {"swe_verified", "swe_multilingual", "swe_pro", "terminal_bench"} | {
    p.stem for p in CONFIGS if p.stem.startswith(("mini_", "opencode_", "claude_code_", "codex_"))}


# what a named profile reads from the environment, as its header lists it (the pool stand-in
# binary is any file here: validating and planning install nothing)
PROFILE_ENV = {
    "SANDBATCH_MODEL_URL": "http://10.0.0.7:8000/v1",
    "SANDBATCH_MODEL_API_KEY": "model-key",
    "SANDBATCH_MODEL_NAME": "served-model",  # the endpoint above is not there to ask for its one model
    "OPEN_SANDBOX_DOMAIN": "127.0.0.1:18080",
    "OPEN_SANDBOX_API_KEY": "server-key",
    "SANDBATCH_POOL_ACCEPT_EULA": "1",
}


@pytest.fixture
def profile_env(monkeypatch, tmp_path_factory):
    for key in (*PROFILE_ENV, "SANDBATCH_POOL_BINARY"):
        monkeypatch.delenv(key, raising=False)
    for key, value in PROFILE_ENV.items():
        monkeypatch.setenv(key, value)
    # the OpenCode configs upload ~/.opencode/bin/opencode: any file there (planning installs nothing),
    home = tmp_path_factory.mktemp("home")
    (home / ".opencode" / "bin").mkdir(parents=True)
    (home / ".opencode" / "bin" / "opencode").write_text("#!/bin/sh\n")
    (home / ".local" / "bin").mkdir(parents=True)  # and claude_code_docker ~/.local/bin/claude
    (home / ".local" / "bin" / "claude").write_text("#!/bin/sh\n")
    # and the Codex config ~/.npm-global/bin/codex
    (home / ".npm-global" / "bin").mkdir(parents=True)
    (home / ".npm-global" / "bin" / "codex").write_text("#!/bin/sh\n")
    monkeypatch.setenv("HOME", str(home))


def load(path: Path, overrides=None) -> config.Config:
    return config.load([path], overrides, default=REPO_ROOT / "config" / "default.yaml")


def test_named_profiles_and_benchmark_files_exist():
    names = {p.stem for p in CONFIGS}
    assert set(NAMED) | {"swe_verified", "swe_multilingual", "swe_pro", "terminal_bench", "default"} <= names


def header_variables(path: Path) -> set[str]:
    """The environment variables a profile's header comment lists."""
    header = "".join(line for line in path.read_text().splitlines(keepends=True) if line.startswith("#"))
    return set(re.findall(r"^#\s+(?:or\s+)?([A-Z][A-Z0-9_]+)\s", header, re.M))


@pytest.mark.parametrize("name", NAMED)
def test_named_profile_header_lists_exactly_the_variables_it_reads(name):
    path = REPO_ROOT / "config" / f"{name}.yaml"
    raw = config.read_yaml(path)
    conn = raw["sandbox"]["opensandbox"]["connection"]
    from sandbatch.harness.pool import BINARY_ENV, EULA_ENV

    read = {raw["model"]["base_url_env"], raw["model"]["api_key_env"], raw["model"]["name_env"], conn["domain_env"],
            conn["api_key_env"], EULA_ENV, BINARY_ENV}
    assert header_variables(path) == read == set(PROFILE_ENV) | {BINARY_ENV}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_validates(path, profile_env):
    cfg = load(path)
    assert cfg.benchmark.kind in FIXTURE_TASKS
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):  # every leaf key carries a comment (or one just above)
        m = re.match(r"^\s*-?\s*[\w./-]+:\s*(\S.*)?$", line)
        if m and m.group(1) and not m.group(1).startswith("#") and "#" not in line and path.stem in COMMENTED:
            assert lines[i - 1].lstrip().startswith("#"), f"{path.name}:{i + 1}: key without a comment: {line!r}"
    if path.stem in NAMED:
        assert cfg.harness.name == "pool" and cfg.model.base_url_env and cfg.model.sampling
        assert cfg.concurrency == 128 or path.stem.startswith("lightning")
    if path.stem == "xs_swe_pro":
        assert (cfg.nodes, cfg.concurrency * cfg.nodes) == (2, 256)


def test_model_url_and_service_address_from_the_environment(profile_env, monkeypatch):
    path = REPO_ROOT / "config" / "xs_swe_verified.yaml"
    monkeypatch.setenv("SANDBATCH_MODEL_URL", "http://127.0.0.1:9999/v1")
    monkeypatch.setenv("OPEN_SANDBOX_DOMAIN", "https://sandboxes.example.com:8443/")
    cfg = load(path)
    assert cfg.model.base_url == "http://127.0.0.1:9999/v1"
    conn = cfg.sandbox.options()["connection"]
    assert (conn["domain"], conn["protocol"]) == ("sandboxes.example.com:8443", "https")
    assert provider_class(cfg.sandbox.provider).service(cfg.sandbox.options()) == "sandboxes.example.com:8443"


def snakemake(workdir: Path, *args: str, timeout: int = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} if env is None else env
    return subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO_ROOT / "Snakefile"),
                           "-d", str(workdir), "--cores", "2", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def overrides(cfg: config.Config, **extra) -> list[str]:
    """--config values that point a config at fixture tasks: nothing else is overridden."""
    out = [f'benchmark={json.dumps({"tasks": str(FIXTURE_TASKS[cfg.benchmark.kind])})}']
    return out + [f"{k}={v}" for k, v in extra.items()]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_plans_against_fixture_tasks(path, tmp_path, profile_env):
    cfg = load(path)
    n_tasks = {"smoke": 5, "swebench": 3, "swebench_multilingual": 2, "swebench_pro": 1, "terminal_bench": 3}
    res = snakemake(tmp_path, "-n", "--configfile", str(path), "--config", *overrides(cfg))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", res.stdout, re.M))
    assert int(jobs["grade"]) == n_tasks[cfg.benchmark.kind] * cfg.repeats, res.stdout


def clean_env(**changes) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PROFILE_ENV)
    env.pop("SANDBATCH_POOL_BINARY", None)
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def validate(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sandbatch.cli", "validate", *args],
                          capture_output=True, text=True, timeout=120, env=env, cwd=REPO_ROOT)


@pytest.mark.parametrize("missing, message", [
    ("SANDBATCH_MODEL_URL", "model.base_url: .* export SANDBATCH_MODEL_URL="),
    ("SANDBATCH_MODEL_API_KEY", "model.api_key_env: the environment variable SANDBATCH_MODEL_API_KEY is not set"),
    ("OPEN_SANDBOX_DOMAIN", "sandbox.opensandbox.connection.domain: .* export OPEN_SANDBOX_DOMAIN="),
    ("OPEN_SANDBOX_API_KEY", "sandbox.opensandbox.connection.api_key_env: .* OPEN_SANDBOX_API_KEY is not set"),
    ("SANDBATCH_POOL_ACCEPT_EULA", "harness.config.install.accept_eula: .* export SANDBATCH_POOL_ACCEPT_EULA=1"),
])
def test_a_missing_variable_is_named_in_one_line_by_validate_and_plan(missing, message, tmp_path):
    path = REPO_ROOT / "config" / "xs_swe_verified.yaml"
    env = clean_env(**{missing: None})
    tasks = overrides(load(path, {"benchmark": {"tasks": str(FIXTURE_TASKS["swebench"])}}))
    for res in (validate(str(path), "--config", *tasks, env=env),
                snakemake(tmp_path, "-n", "--configfile", str(path), "--config", *tasks, env=env)):
        assert res.returncode != 0
        errors = [line for line in res.stderr.splitlines() if "error" in line.lower()]
        assert len(errors) == 1 and re.search(message, errors[0]), res.stderr[-2000:]
        assert "Traceback" not in res.stderr
    assert not (tmp_path / "results").exists()
    ok = validate(str(path), "--config", *tasks, env=clean_env())
    assert ok.returncode == 0, ok.stderr
    # the proxy address is derived toward the server (here on this host): never loopback
    advertise = re.search(r"^# the sandboxes reach the model proxy at (\S+)$", ok.stderr, re.M).group(1)
    assert not ipaddress.ip_address(advertise).is_loopback


def test_every_missing_setting_is_named_at_once(tmp_path):
    """Nothing set but the config: validate and a plan name the EULA, the server's address and
    key, the model's URL and key and the task file in one try, one line each."""
    path = str(REPO_ROOT / "config" / "xs_swe_pro.yaml")
    env = clean_env(**{key: None for key in PROFILE_ENV})
    tasks = f'benchmark={{"tasks": "{tmp_path}/tasks.jsonl"}}'
    for res in (validate(path, "--config", tasks, env=env),
                snakemake(tmp_path, "-n", "--configfile", path, "--config", tasks, env=env)):
        assert res.returncode != 0 and "Traceback" not in res.stderr
        errors = [line for line in res.stderr.splitlines() if line.startswith("sandbatch: error: ")]
        named = ["harness.config.install.accept_eula", "sandbox.opensandbox.connection.domain:",
                 "sandbox.opensandbox.connection.api_key_env", "model.base_url", "model.api_key_env",
                 "benchmark.tasks"]
        assert [next((n for n in named if n in e), e) for e in errors] == named, res.stderr[-3000:]
    assert not (tmp_path / "results").exists()


def test_profile_sends_the_one_model_the_endpoint_serves(tmp_path):
    """model.name unset: the one model /v1/models lists is the name, asked at plan time; several,
    or an endpoint that does not answer, stop the plan in one line naming the variable to set."""
    from harness_support import scripted_model_server

    path = REPO_ROOT / "config" / "xs_swe_verified.yaml"
    tasks = overrides(load(path, {"benchmark": {"tasks": str(FIXTURE_TASKS["swebench"])}}))
    with scripted_model_server({"models": ["Qwen/Qwen3-32B"]}) as (url, model):
        env = clean_env(SANDBATCH_MODEL_URL=url, SANDBATCH_MODEL_NAME=None)
        res = validate(str(path), "--config", *tasks, env=env)
        assert res.returncode == 0, res.stderr
        assert re.search(r"^  name: Qwen/Qwen3-32B$", res.stdout, re.M), res.stdout
        res = snakemake(tmp_path, "-n", "--configfile", str(path), "--config", *tasks, env=env)
        assert res.returncode == 0, res.stderr[-2000:]
        assert [r["path"] for r in model.requests] == ["/v1/models", "/v1/models"]  # once each, never per rollout
        assert all(r["headers"].get("authorization") == "Bearer model-key" for r in model.requests)
        # the variable the header lists wins over the endpoint's list
        res = validate(str(path), "--config", *tasks, env=clean_env(SANDBATCH_MODEL_URL=url))
        assert res.returncode == 0 and re.search(r"^  name: served-model$", res.stdout, re.M), res.stderr
        assert len(model.requests) == 2
    with scripted_model_server({"models": ["Qwen/Qwen3-32B", "Qwen/Qwen3-8B"]}) as (url, _):
        env = clean_env(SANDBATCH_MODEL_URL=url, SANDBATCH_MODEL_NAME=None)
        for res in (validate(str(path), "--config", *tasks, env=env),
                    snakemake(tmp_path, "-n", "--configfile", str(path), "--config", *tasks, env=env)):
            assert res.returncode != 0 and "Traceback" not in res.stderr
            errors = [line for line in res.stderr.splitlines() if "error" in line.lower()]
            assert len(errors) == 1, res.stderr[-2000:]
            assert (f"model.name: not set, and {url}/models lists 2 models (Qwen/Qwen3-32B, Qwen/Qwen3-8B); "
                    "export SANDBATCH_MODEL_NAME=<model id> (named by model.name_env)") in errors[0], errors
    # the endpoint is down (the scripted model is gone from its port)
    res = snakemake(tmp_path, "-n", "--configfile", str(path), "--config", *tasks, env=env)
    errors = [line for line in res.stderr.splitlines() if "error" in line.lower()]
    assert res.returncode != 0 and len(errors) == 1, res.stderr[-2000:]
    assert re.search(rf"model.name: not set, and the model endpoint cannot say which model it serves: {url}/models "
                     r"did not answer with a model list \(.*\); start the endpoint, or export SANDBATCH_MODEL_NAME=",
                     errors[0]), errors
    assert not (tmp_path / "results").exists()


def test_pool_binary_variable_replaces_the_installer(tmp_path):
    path = REPO_ROOT / "config" / "xs_terminal_bench.yaml"
    tasks = overrides(load(path, {"benchmark": {"tasks": str(FIXTURE_TASKS["terminal_bench"])}}))
    binary = tmp_path / "pool"
    binary.write_text("#!/bin/sh\n")
    res = validate(str(path), "--config", *tasks,
                   env=clean_env(SANDBATCH_POOL_ACCEPT_EULA=None, SANDBATCH_POOL_BINARY=str(binary)))
    assert res.returncode == 0, res.stderr
    res = validate(str(path), "--config", *tasks,
                   env=clean_env(SANDBATCH_POOL_ACCEPT_EULA=None, SANDBATCH_POOL_BINARY=str(tmp_path / "nope")))
    assert res.returncode != 0 and "$SANDBATCH_POOL_BINARY: " in res.stderr and "is not a file" in res.stderr


def test_missing_task_file_names_fetch_tasks(tmp_path):
    res = validate(str(REPO_ROOT / "config" / "xs_swe_pro.yaml"), "--config",
                   f'benchmark={{"tasks": "{tmp_path}/tasks.jsonl"}}', env=clean_env())
    assert res.returncode != 0
    assert re.search(r"benchmark.tasks: .* not found; write it with `sandbatch fetch-tasks swebench_pro", res.stderr)


def test_pro_rows_without_run_scripts_are_refused_at_plan_time(tmp_path):
    row = json.loads((FIX / "swe_pro" / "tasks.jsonl").read_text().splitlines()[0])
    row.pop("repo_dir")
    (tmp_path / "tasks.jsonl").write_text(json.dumps(row) + "\n")
    tasks = f'benchmark={{"tasks": "{tmp_path}/tasks.jsonl"}}'
    path = str(REPO_ROOT / "config" / "xs_swe_pro.yaml")
    for res in (validate(path, "--config", tasks, env=clean_env()),
                snakemake(tmp_path, "-n", "--configfile", path, "--config", tasks, env=clean_env())):
        assert res.returncode != 0
        assert re.search(r"tasks.jsonl:1: field run_script: missing, and \S+/run_scripts/instance_greeter__greeter-0001/"
                         r"run_script.sh does not exist; .*`sandbatch fetch-tasks swebench_pro` writes both", res.stderr)
    assert not (tmp_path / "results").exists()


def test_provider_that_needs_an_image_refuses_a_task_without_one(tmp_path):
    res = snakemake(tmp_path, "-n", "--config", 'sandbox={"provider": "docker"}', env=clean_env())
    assert res.returncode != 0
    assert re.search(r"sandbox.default_image: task smoke__\S+ of data/smoke/tasks.jsonl names no image", res.stderr)
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_terminal_bench_oracle_run(tmp_path):
    """Gold validation: every Terminal-Bench fixture task scores 1 with its solve.sh,
    graded in the agent's sandbox; the broken verifier is an infra error, not a 0."""
    cfg = load(REPO_ROOT / "config" / "terminal_bench.yaml")
    res = snakemake(tmp_path, "--configfile", str(REPO_ROOT / "config" / "terminal_bench.yaml"),
                    "--config", *overrides(cfg), 'sandbox={"provider": "local"}',
                    "retries=0", "run=tb_gold",
                    timeout=540)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rows = {r["instance_id"]: r for r in map(json.loads, (tmp_path / "results/tb_gold/rollouts.jsonl").open())}
    assert rows["hello-world"]["reward"] == 1.0 and rows["hello-world"]["resolved"]
    assert rows["json-reward"]["reward"] == 1.0
    assert rows["no-reward"]["status"] == "infra_error" and rows["no-reward"]["failure_class"] == "grading_no_reward"
    assert not list(default_root(tmp_path).glob("sb-*"))  # nothing left behind

    from swebench.harness.utils import get_predictions_from_file

    preds = get_predictions_from_file(str(tmp_path / "results/tb_gold/predictions.jsonl"), "unused", "test")
    assert {p["instance_id"] for p in preds} == set(rows)
    assert all(set(p) == {"instance_id", "model_name_or_path", "model_patch"} for p in preds)
    hello = next(p for p in preds if p["instance_id"] == "hello-world")
    assert "+Hello, world!" in hello["model_patch"] and hello["model_patch"].endswith("\n")
