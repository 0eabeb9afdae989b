"""Every config in config/ validates and plans (`snakemake -n`) against fixture task files;
a Terminal-Bench run of the real workflow with the oracle harness scores every task
(gold validation), and its predictions.jsonl loads with the swebench package."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sandbatch import REPO_ROOT, config
from sandbatch.harness import HARNESSES
from sandbatch.sandbox import PROVIDERS

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
COMMENTED = set(NAMED) | {"swe_verified", "swe_multilingual", "swe_pro", "terminal_bench"}


def load(path: Path) -> config.Config:
    return config.load([path], default=REPO_ROOT / "config" / "default.yaml")


def test_named_profiles_and_benchmark_files_exist():
    names = {p.stem for p in CONFIGS}
    assert set(NAMED) | {"swe_verified", "swe_multilingual", "swe_pro", "terminal_bench", "default"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_validates(path):
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


def test_model_url_from_the_environment(monkeypatch):
    path = REPO_ROOT / "config" / "xs_swe_verified.yaml"
    monkeypatch.setenv("SANDBATCH_MODEL_URL", "http://127.0.0.1:9999/v1")
    assert load(path).model.base_url == "http://127.0.0.1:9999/v1"
    monkeypatch.setenv("SANDBATCH_MODEL_URL", "")
    assert load(path).model.base_url == "http://127.0.0.1:8000/v1"


def snakemake(workdir: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO_ROOT / "Snakefile"),
                           "-d", str(workdir), "--cores", "2", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def overrides(cfg: config.Config, **extra) -> list[str]:
    """--config values that point a config at fixture tasks and at what this checkout has."""
    out = [f'benchmark={json.dumps({"tasks": str(FIXTURE_TASKS[cfg.benchmark.kind])})}']
    if cfg.harness.name not in HARNESSES:  # e.g. pool, registered by its own module
        out.append('harness={"name": "oracle"}')
    elif cfg.harness.name == "pool":  # installing pool is the user's EULA decision; a plan installs nothing
        out.append('harness={"name": "pool", "config": {"install": {"method": "path", "path": "pool"}}}')
    sandbox = {"provider": cfg.sandbox.provider if cfg.sandbox.provider in PROVIDERS else "local"}
    out.append(f"sandbox={json.dumps(sandbox)}")
    out += [f"{k}={v}" for k, v in extra.items()]
    return out


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_plans_against_fixture_tasks(path, tmp_path):
    cfg = load(path)
    n_tasks = {"smoke": 5, "swebench": 3, "swebench_multilingual": 2, "swebench_pro": 1, "terminal_bench": 3}
    res = snakemake(tmp_path, "-n", "--configfile", str(path), "--config", *overrides(cfg))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", res.stdout, re.M))
    assert int(jobs["grade"]) == n_tasks[cfg.benchmark.kind] * cfg.repeats, res.stdout


@pytest.mark.slow
def test_terminal_bench_oracle_run(tmp_path):
    """Gold validation: every Terminal-Bench fixture task scores 1 with its solve.sh,
    graded in the agent's sandbox; the broken verifier is an infra error, not a 0."""
    cfg = load(REPO_ROOT / "config" / "terminal_bench.yaml")
    res = snakemake(tmp_path, "--configfile", str(REPO_ROOT / "config" / "terminal_bench.yaml"),
                    "--config", *overrides(cfg), 'harness={"name": "oracle"}', 'sandbox={"provider": "local"}',
                    "retries=0", "run=tb_gold",
                    timeout=540)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rows = {r["instance_id"]: r for r in map(json.loads, (tmp_path / "results/tb_gold/rollouts.jsonl").open())}
    assert rows["hello-world"]["reward"] == 1.0 and rows["hello-world"]["resolved"]
    assert rows["json-reward"]["reward"] == 1.0
    assert rows["no-reward"]["status"] == "infra_error" and rows["no-reward"]["failure_class"] == "grading_no_reward"
    assert not list((tmp_path / ".sandbatch" / "sandboxes").glob("sb-*"))  # nothing left behind

    from swebench.harness.utils import get_predictions_from_file

    preds = get_predictions_from_file(str(tmp_path / "results/tb_gold/predictions.jsonl"), "unused", "test")
    assert {p["instance_id"] for p in preds} == set(rows)
    assert all(set(p) == {"instance_id", "model_name_or_path", "model_patch"} for p in preds)
    hello = next(p for p in preds if p["instance_id"] == "hello-world")
    assert "+Hello, world!" in hello["model_patch"] and hello["model_patch"].endswith("\n")
