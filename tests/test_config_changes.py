"""A changed config is run as it is now, by the single next `snakemake` invocation.

Each case starts from a copy of one finished run (two smoke tasks, one repeat), changes one
thing, runs the real workflow once and checks that the rollouts the change needs were done,
the others' records left as they were (mtimes), and the aggregate describes the new config.
A run whose every rollout ended in an infrastructure error (a real one: the local provider
given a sandbox root that is a file) exits non-zero after writing its report.
"""

import json
import shutil
import subprocess
import sys

import pytest

from docker_fixtures import containers, docker_base_image, docker_engine  # noqa: F401 (fixtures)
from sandbatch.core.config import load
from sandbatch.core.instance import read_instance
from sandbatch.ops.workflow import agent_settings, stamps
from sandbatch.sandbox.local import default_root
from workflow_util import REPO, metrics, mtimes, rollouts, snakemake, write_config

pytestmark = pytest.mark.slow
BASE = {"run": "cc", "benchmark": {"limit": 2}}
TWO = ["smoke__calc-1", "smoke__textutils-1"]
RECORDS = "smoke__*/*/*.*"  # every rollout's records (sandbox.json ... grade.json, grade.log)


def _ok(proc):
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _run(wd, config: dict, *args: str):
    return snakemake(wd, "--configfile", str(write_config(wd, "cc.yaml", config)), *args)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    wd = tmp_path_factory.mktemp("base")
    _ok(_run(wd, BASE))
    assert sorted(r["task_id"] for r in rollouts(wd, "cc")) == TWO
    return wd


@pytest.fixture
def run_copy(finished, tmp_path):
    """The finished run in a directory of its own, mtimes and Snakemake's records kept."""
    wd = tmp_path / "wd"
    shutil.copytree(finished, wd, symlinks=True)
    return wd


def _changed(before: dict[str, int], after: dict[str, int]) -> set[str]:
    return {k for k, v in after.items() if before.get(k) != v}


def _rollouts_of(wd) -> list[tuple[str, int]]:
    return sorted((r["task_id"], r["repeat"]) for r in rollouts(wd, "cc"))


def test_more_repeats_run_only_the_new_rollouts(run_copy):
    before = mtimes(run_copy, RECORDS, "cc")
    _ok(_run(run_copy, {**BASE, "repeats": 3}))
    assert _rollouts_of(run_copy) == [(t, r) for t in TWO for r in range(3)]
    changed = _changed(before, mtimes(run_copy, RECORDS, "cc"))
    assert changed and all("/0/" not in k for k in changed), sorted(changed)
    m = metrics(run_copy, "cc")
    assert m["rollouts"] == 6 and m["pass_at_k"] == {"1": 100.0, "2": 100.0, "3": 100.0}
    assert "(2 tasks x 3 repeats = 6 rollouts)" in (run_copy / "results/cc/report.md").read_text()
    assert (run_copy / "results/cc/predictions.r2.jsonl").is_file()


@pytest.mark.parametrize("selection,kept,added", [
    ({"limit": 1}, ["smoke__calc-1"], []),
    ({"limit": None, "filter": "textutils|inventory"}, ["smoke__textutils-1"], ["smoke__inventory-1"]),
    ({"instance_ids": ["smoke__textutils-1", "smoke__duration-1"]}, ["smoke__textutils-1"], ["smoke__duration-1"]),
])
def test_a_new_selection_is_aggregated_and_redoes_nothing_it_kept(run_copy, selection, kept, added):
    before = mtimes(run_copy, RECORDS, "cc")
    _ok(_run(run_copy, {**BASE, "benchmark": {**BASE["benchmark"], **selection}}))
    assert _rollouts_of(run_copy) == sorted((t, 0) for t in kept + added)
    after = mtimes(run_copy, RECORDS, "cc")
    assert {k.split("/")[2] for k in _changed(before, after)} == set(added)
    dropped = set(TWO) - set(kept)
    assert all((run_copy / "results/cc" / t / "0/grade.json").is_file() for t in dropped)  # left on disk
    assert metrics(run_copy, "cc")["rollouts"] == len(kept + added)
    preds = (run_copy / "results/cc/predictions.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["instance_id"] for line in preds) == sorted(kept + added)
    tasks = len(kept + added)
    assert f"({tasks} tasks x 1 repeats = {tasks} rollouts)" in (run_copy / "results/cc/report.md").read_text()


@pytest.mark.parametrize("change,check", [
    ({"harness": {"name": "none"}}, lambda rows: all(r["failure_class"] == "empty_patch" for r in rows)),
    ({"timeouts": {"agent": 900}}, lambda rows: all(r["resolved"] for r in rows)),
    ({"model": {"sampling": {"temperature": 0.5}}}, lambda rows: all(r["resolved"] for r in rows)),
])
def test_agent_settings_redo_every_rollout(run_copy, change, check):
    before = mtimes(run_copy, RECORDS, "cc")
    _ok(_run(run_copy, {**BASE, **change}))
    after = mtimes(run_copy, RECORDS, "cc")
    for name in ("sandbox.json", "harness.json", "patch.json", "grade.json", "response.json"):
        redone = {k for k in _changed(before, after) if k.endswith("/" + name)}
        assert len(redone) == 2, (name, sorted(_changed(before, after)))
    rows = rollouts(run_copy, "cc")
    assert len(rows) == 2 and check(rows), rows
    assert not list(default_root(run_copy).glob("*"))


def test_another_provider_redoes_every_rollout_there(run_copy, docker_engine, docker_base_image):
    before = mtimes(run_copy, RECORDS, "cc")
    _ok(_run(run_copy, {**BASE, "sandbox": {"provider": "docker", "default_image": docker_base_image}}))
    assert len([k for k in _changed(before, mtimes(run_copy, RECORDS, "cc")) if k.endswith("/grade.json")]) == 2
    handles = [json.loads(p.read_text()) for p in (run_copy / "results/cc").glob("smoke__*/0/sandbox.json")]
    assert len(handles) == 2 and {h["provider"] for h in handles} == {"docker"}, handles
    assert all(r["resolved"] for r in rollouts(run_copy, "cc"))
    # this run instance's containers only: the name "cc" is every suite's
    assert containers(docker_engine, run="cc", instance=read_instance(run_copy / "results/cc")) == []


def test_settings_of_the_run_alone_redo_nothing(run_copy):
    """Concurrency, retries, where local sandboxes live, traces: no rollout depends on them."""
    before = mtimes(run_copy, "**/*", "cc")
    proc = _ok(_run(run_copy, {**BASE, "concurrency": 1, "retries": 1,
                               "sandbox": {"local": {"root": str(run_copy / "elsewhere")}}}))
    assert "Nothing to be done" in proc.stdout + proc.stderr
    changed = {k for k in _changed(before, mtimes(run_copy, "**/*", "cc")) if (run_copy / k).is_file()}
    # nothing written: no job runs (the steps' config is written when a run next starts jobs)
    assert changed == set()


def _infra_root(wd):
    """A sandbox root that is a regular file: every local sandbox create fails for real."""
    path = wd / "not-a-directory"
    path.write_text("")
    return {"local": {"root": str(path)}}


def test_infra_errors_beside_graded_rollouts_then_rerun_errors(run_copy):
    """Infra errors in a run that graded something: exit 0, counted apart; `sandbatch
    rerun-errors` then the run command redo those alone."""
    broken = {**BASE, "repeats": 2, "retries": 0, "sandbox": _infra_root(run_copy)}
    _ok(_run(run_copy, broken))
    rows = {(r["task_id"], r["repeat"]): r for r in rollouts(run_copy, "cc")}
    assert len(rows) == 4 and all(rows[t, 0]["resolved"] for t in TWO)
    assert all(rows[t, 1]["status"] == "infra_error" and rows[t, 1]["failure_class"] == "sandbox_create"
               for t in TWO)
    m = metrics(run_copy, "cc")
    assert m["infra_error_rate"]["numerator"] == 2 and m["status_counts"] == {"ok": 2, "infra_error": 2}
    assert (run_copy / "results/cc/report.md").read_text().startswith("# Run cc")

    first = mtimes(run_copy, "*/0/*.*", "cc")
    fix = subprocess.run([sys.executable, "-m", "sandbatch.cli", "rerun-errors", "cc", "-d", str(run_copy)],
                         capture_output=True, text=True, timeout=120)
    assert fix.returncode == 0, fix.stderr
    _ok(_run(run_copy, {**broken, "sandbox": {}}))
    assert all(r["resolved"] for r in rollouts(run_copy, "cc")) and len(rollouts(run_copy, "cc")) == 4
    assert mtimes(run_copy, "*/0/*.*", "cc") == first


def test_a_run_that_graded_nothing_fails_after_its_report(tmp_path):
    cfg = {"run": "down", "retries": 0, "benchmark": {"limit": 2}, "sandbox": _infra_root(tmp_path)}
    proc = snakemake(tmp_path, "--configfile", str(write_config(tmp_path, "down.yaml", cfg)))
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sandbatch: error:")]
    assert errors == ["sandbatch: error: run down graded nothing: all 2 rollouts ended in an infrastructure "
                      "error (sandbox_create 2); see results/down/report.md"], proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    report = (tmp_path / "results/down/report.md").read_text().splitlines()
    assert report[0].startswith("**Nothing was graded: all 2 rollouts ended in an infrastructure error")
    assert report[2].startswith("- `sandbox_create` (2 rollouts), e.g. smoke__")
    assert "cannot create local sandbox under" in report[2] and "Not a directory" in report[2]
    assert metrics(tmp_path, "down")["status_counts"] == {"infra_error": 2}


def _raw(changes: dict) -> dict:
    return load([], changes, default=REPO / "config" / "default.yaml").model_dump(mode="json")


@pytest.mark.parametrize("change,redoes", [
    ({"harness": {"name": "none"}}, True),
    ({"model": {"name": "other"}}, True),
    ({"timeouts": {"agent": 60}}, True),
    ({"patch": {"exclude": []}}, True),
    ({"sandbox": {"provider": "docker", "default_image": "img"}}, True),
    ({"benchmark": {"prompt_template": "{problem_statement}"}}, True),
    ({"repeats": 4, "concurrency": 9, "retries": 0, "run": "x"}, False),
    ({"benchmark": {"limit": 1, "filter": "calc", "instance_ids": ["a"]}}, False),
    ({"grading": {"reward_threshold": 0.5}, "timeouts": {"grade": 10}, "aggregate": {"report_title": "t"}}, False),
    ({"sandbox": {"docker": {"network": "none"}, "opensandbox": {"create": {"retries": 1}}}}, False),  # not selected
    ({"sandbox": {"local": {"root": "/elsewhere"}, "create_rate": 1}}, False),
    ({"model": {"proxy": {"port": 9999, "retries": 1}}}, False),
])
def test_agent_stamp_names_what_an_agent_run_depends_on(change, redoes):
    base, changed = _raw({}), _raw(change)
    assert (agent_settings(base) != agent_settings(changed)) is redoes
    names = ["t/0"]
    assert (stamps(base, names)["agent"] != stamps(changed, names)["agent"]) is redoes


@pytest.mark.parametrize("provider,plumbing,setting", [
    ("docker", {"label_prefix": "other.", "api_timeout": 30}, {"network": "none"}),
    ("opensandbox", {"connection": {"domain": "elsewhere:8080"}}, {"network_policy": False}),
])
def test_a_selected_providers_plumbing_reruns_no_agent(provider, plumbing, setting):
    """The provider class names its plumbing (Provider.plumbing); its other options are the agent's."""
    def raw(options: dict) -> dict:
        return _raw({"sandbox": {"provider": provider, "default_image": "img", provider: options}})

    assert agent_settings(raw({})) == agent_settings(raw(plumbing))
    assert agent_settings(raw({})) != agent_settings(raw(setting))
