"""profiles/slurm: how Snakemake reads it, and that it fits the workflow's rules.

Runs without Slurm: it parses the command line the way `snakemake` does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from snakemake.cli import parse_args
from snakemake.profiles import ProfileConfigFileParser

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "profiles" / "slurm" / "config.yaml"
STEPS = ("sandbox", "harness", "convert", "patch", "grade")


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """A working directory with its own default workflow profile that must not leak in."""
    default = tmp_path / "profiles" / "default"
    default.mkdir(parents=True)
    (default / "config.yaml").write_text("executor: local\ncores: 1\nconfig: [leaked=yes]\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def args_for(*argv: str):
    return parse_args(["-s", str(REPO / "Snakefile"), *argv])[1]


def test_workflow_profile_slurm_replaces_the_default_profile(elsewhere):
    args = args_for("--workflow-profile", "slurm")  # found as <Snakefile dir>/profiles/slurm
    assert args.executor == "slurm"
    assert args.config is None and args.cores is None  # nothing from profiles/default
    assert args.jobs == 1000
    assert args.scheduler == "greedy" and args.rerun_incomplete and args.keep_going
    assert args.group_components == {"rollout": 1}
    assert args.slurm_status_command == "squeue"


def test_plain_profile_flag_is_overridden_by_the_default_profile(elsewhere):
    """Why the docs say --workflow-profile: with --profile, profiles/default wins key by key."""
    args = args_for("--profile", str(PROFILE.parent))
    assert args.executor == "local"
    assert args.config == ["leaked=yes"]


def test_a_workflow_profile_path_that_does_not_resolve_is_silently_ignored(elsewhere):
    """`profiles/slurm` is relative to the working directory: elsewhere it loads no profile."""
    args = args_for("--workflow-profile", "profiles/slurm")
    assert args.executor is None


def test_partition_and_account_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("SANDBATCH_SLURM_PARTITION", "gpu")
    monkeypatch.delenv("SANDBATCH_SLURM_ACCOUNT", raising=False)
    with PROFILE.open() as stream:
        parsed = ProfileConfigFileParser().parse(stream)
    assert "slurm_partition=gpu" in parsed["default-resources"]
    assert "slurm_account=" in parsed["default-resources"]  # empty: the plugin then guesses or omits it


def test_set_resources_name_the_workflows_grouped_rules():
    profile = yaml.safe_load(PROFILE.read_text())
    rules_text = "\n".join(p.read_text() for p in sorted((REPO / "workflow" / "rules").glob("*.smk")))
    blocks = dict(re.findall(r"^rule (\w+):\n((?:[ \t]+.*\n|\n)*)", rules_text, flags=re.M))
    assert set(profile["set-resources"]) == set(STEPS)
    for step in STEPS:
        assert 'group: "rollout"' in blocks[step], f"rule {step} must be in group 'rollout'"
    assert "localrule: True" in blocks["aggregate"], "aggregate must stay on the head node"
    runtimes = {step: profile["set-resources"][step]["runtime"] for step in STEPS}
    assert runtimes["harness"] == max(runtimes.values())
    # cores summed over parallel steps (convert and patch) would double each request: only harness sets them
    assert [s for s in STEPS if "cpus_per_task" in profile["set-resources"][s]] == ["harness"]
    assert "cpus_per_task" not in profile["default-resources"]
