"""A run touches only the sandboxes it created: every run instance (working directory + run
name) has its own identity, its sandboxes carry it, and reaping selects by it.

The case of a colleague on the same engine: two working directories, the same run name, both
running. One finishes, is stopped and reaped; the other's live grading sandboxes survive and
it completes resolved, graded at its first attempt. On a real Docker engine and on the real
OpenSandbox server.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from docker_fixtures import docker_base_image, docker_engine  # noqa: F401 (fixtures)
from ops_util import smoke_rows, start, wait_for, write_tasks
from real_opensandbox import real_opensandbox  # noqa: F401 (fixture)
from suite import unique_run
from sandbatch.core.instance import INSTANCE_FILE, claim, ensure_instance, read_instance
from sandbatch.sandbox import SandboxSpec, get_provider
from sandbatch.sandbox.local import default_root
from workflow_util import REPO, rollouts, snakemake, write_config

RELEASE = "/tmp/sandbatch-release"
KEY_ENV = "SANDBATCH_TEST_OS_KEY"


# --- the identity file ---------------------------------------------------------------------------
def test_identity_is_made_once_and_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = Path("results/r")
    assert read_instance(run_dir) is None
    first = ensure_instance(run_dir)
    assert ensure_instance(run_dir) == first and claim(run_dir) == (first, None)
    # results copied into another working directory get an identity of their own there
    other = tmp_path / "copy"
    (other / "results").mkdir(parents=True)
    (other / "results" / "r").mkdir()
    (other / "results" / "r" / INSTANCE_FILE).write_text((run_dir / INSTANCE_FILE).read_text())
    monkeypatch.chdir(other)
    new, note = claim(Path("results/r"))
    assert new != first and "identity of its own" in note
    assert claim(Path("results/r")) == (new, None)


def test_a_finished_local_run_keeps_its_identity(tmp_path):
    """The identity is made when the run starts and kept by every later run of the directory."""
    proc = snakemake(tmp_path, "--config", "benchmark={'limit': 1}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = read_instance(tmp_path / "results" / "default")
    assert first
    meta = [json.loads(p.read_text()) for p in default_root(tmp_path).glob("*/meta.json")]
    assert meta == []  # all reaped
    proc = snakemake(tmp_path, "--config", "benchmark={'limit': 1}", "--forcerun", "grade")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert read_instance(tmp_path / "results" / "default") == first


# --- two working directories, one run name -------------------------------------------------------
def _sandbox_settings(kind: str, image: str, server) -> dict:
    if kind == "docker":
        return {"provider": "docker", "default_image": image}
    return {"provider": "opensandbox", "default_image": image,
            "opensandbox": {"connection": {"domain": server.domain, "protocol": server.protocol,
                                           "api_key_env": KEY_ENV, "request_timeout": 30},
                            "network_policy": False}}  # the test server has no egress sidecar (real_opensandbox.py)


def _sandbox_config(workdir: Path, run: str):
    """The sandbox settings a run was started with (schema defaults filled in)."""
    from sandbatch.core.config import Config

    return Config.model_validate_json((workdir / "results" / run / "_settings" / "run.json").read_text()).sandbox


def _list(settings, labels: dict) -> list[str]:
    async def go():
        async with get_provider(settings) as provider:
            return sorted(i.id for i in await provider.list(labels))
    return asyncio.run(go())


def _release(settings, ids: list[str]) -> None:
    """Let the held grading commands go on (they wait for RELEASE inside their sandbox)."""
    async def go():
        async with get_provider(settings) as provider:
            for sid in ids:
                sandbox = await provider.connect(sid, SandboxSpec(workdir="/"))
                await sandbox.exec(f"touch {RELEASE}", timeout=60, cwd="/")
    asyncio.run(go())


@pytest.fixture(params=["docker", "opensandbox"])
def provider_kind(request, docker_base_image):
    if request.param == "opensandbox":
        server = request.getfixturevalue("real_opensandbox")
        os.environ[KEY_ENV] = server.key
        return request.param, server
    return request.param, None


@pytest.mark.slow
def test_two_directories_with_one_run_name_leave_each_other_alone(tmp_path, provider_kind, docker_base_image):
    kind, server = provider_kind
    sandbox = _sandbox_settings(kind, docker_base_image, server)
    run = unique_run("twin")
    rows = smoke_rows()[:2]
    # B's grading waits (bounded) until the test releases it, so B is mid-grading while A ends
    held = [dict(r, test_cmd=f"for i in $(seq 1200); do [ -e {RELEASE} ] && break; sleep 0.25; done; "
                             + r["test_cmd"]) for r in rows]
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    for d in (a_dir, b_dir):
        d.mkdir()
    base = {"run": run, "retries": 0, "harness": {"name": "oracle"}, "sandbox": sandbox}
    cfg_b = write_config(b_dir, "b.yaml", {**base, "benchmark": {
        "kind": "smoke", "tasks": str(write_tasks(b_dir / "tasks.jsonl", held))}})
    cfg_a = write_config(a_dir, "a.yaml", {**base, "benchmark": {
        "kind": "smoke", "tasks": str(write_tasks(a_dir / "tasks.jsonl", rows[:1]))}})

    b = start(b_dir, "--cores", "2", "--configfile", str(cfg_b))
    try:
        b_id = wait_for(lambda: read_instance(b_dir / "results" / run), 120, "B's identity", b)
        settings = wait_for(lambda: (b_dir / "results" / run / "_settings" / "run.json").is_file(), 120,
                            "B's settings", b) and _sandbox_config(b_dir, run)
        graders = wait_for(lambda: (lambda ids: ids if len(ids) == 2 else None)(
            _list(settings, {"run": run, "instance": b_id, "role": "grade"})), 600, "B's grading sandboxes", b)

        # A: the same run name in another directory, from start to end, then stopped and reaped
        proc = snakemake(a_dir, "--configfile", str(cfg_a))
        assert proc.returncode == 0, proc.stderr[-3000:]
        a_id = read_instance(a_dir / "results" / run)
        assert a_id and a_id != b_id
        assert rollouts(a_dir, run)[0]["resolved"]
        for args in (["stop", run, "-d", str(a_dir)], ["reap", "--run", run]):
            res = subprocess.run([sys.executable, "-m", "sandbatch.cli", *args], cwd=a_dir,
                                 capture_output=True, text=True, timeout=300)
            assert res.returncode == 0, res.stdout + res.stderr
        assert _list(settings, {"run": run, "instance": a_id}) == []

        # B's grading sandboxes lived through all of that
        assert _list(settings, {"run": run, "instance": b_id, "role": "grade"}) == graders
        assert b.poll() is None
        _release(settings, graders)
        assert b.wait(timeout=600) == 0, (b_dir / "snakemake.out").read_text()[-3000:]
    finally:
        if b.poll() is None:
            b.kill()
            b.wait()
    out = rollouts(b_dir, run)
    assert [r["resolved"] for r in out] == [True, True], [(r["instance_id"], r["failure_class"]) for r in out]
    for r in rows:
        grade = json.loads((b_dir / "results" / run / r["instance_id"] / "0" / "grade.json").read_text())
        assert grade["status"] == "ok" and grade["attempt"] == 1, grade
    assert _list(settings, {"run": run}) == []  # each run reaped its own at its end
