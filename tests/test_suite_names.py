"""Two suites on one engine never see each other's sandboxes (suite.py): the same test in two
pytest sessions names its run differently, so a suite killed part-way leaves containers the
next suite's "nothing left" checks do not count."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from docker_fixtures import containers, docker_base_image, docker_engine  # noqa: F401 (fixtures)
from suite import token

TESTS = Path(__file__).resolve().parent

# the same test, run by each session below; it records its run label, what it saw of that label
# before making its sandbox, and its session's token
INNER = '''
import asyncio, json, os, signal

from docker_fixtures import containers, docker_base_image, docker_engine, docker_run_label  # noqa: F401
from suite import token


def record(**fields):
    fields.update(token=token())
    with open(os.environ["SUITE_NAMES_OUT"], "a") as out:
        out.write(json.dumps(fields) + "\\n")


def test_the_same_name(docker_engine, docker_base_image, docker_run_label):
    from sandbatch.sandbox.base import SandboxSpec
    from sandbatch.sandbox.docker import DockerProvider

    seen = containers(docker_engine, run=docker_run_label)
    spec = SandboxSpec(image=docker_base_image, labels={"run": docker_run_label}, ttl_seconds=600)
    asyncio.run(DockerProvider().create(spec))
    record(label=docker_run_label, seen=seen)
    if os.environ.get("SUITE_NAMES_KILL"):
        os.kill(os.getpid(), signal.SIGKILL)  # a suite killed part-way: the label's sweep never runs
'''


def _session(tmp_path: Path, name: str, *args: str, kill: bool = False) -> tuple[int, list[dict], str]:
    """One pytest session of INNER in a directory of its own: its exit code, its records, its output."""
    wd = tmp_path / name
    wd.mkdir()
    (wd / "pytest.ini").write_text("[pytest]\n")
    (wd / "test_inner.py").write_text(INNER)
    out = wd / "records.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]), SUITE_NAMES_OUT=str(out))
    if kill:
        env["SUITE_NAMES_KILL"] = "1"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "suite", "-p", "no:cacheprovider", *args]
    proc = subprocess.Popen(cmd, cwd=wd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:  # a session's start-up takes seconds; a few minutes is a hung one
        log, _ = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"session {name} still running after 180 s: {proc.communicate()[0][-3000:]}") from None
    records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return proc.returncode, records, log[-3000:]


def test_two_sessions_of_one_test_never_see_each_others_containers(tmp_path, docker_engine, docker_base_image):
    killed = []
    try:
        code, first, log = _session(tmp_path, "killed", "test_inner.py::test_the_same_name", kill=True)
        assert code == -signal.SIGKILL and len(first) == 1, (code, first, log)
        killed = containers(docker_engine, run=first[0]["label"])
        assert len(killed) == 1, f"the killed session's sandbox: {killed}"  # it is left, as a crash leaves it

        # the next suite: the same test, its own label, nothing of the first seen
        code, second, log = _session(tmp_path, "next", "test_inner.py::test_the_same_name")
        assert code == 0 and len(second) == 1, (code, second, log)
        (again,) = second
        assert again["label"] != first[0]["label"] and again["seen"] == []
        assert containers(docker_engine, run=again["label"]) == []  # its own sweep ran
        # one token per session, in every label it gives
        assert len({first[0]["token"], again["token"], token()}) == 3
        assert first[0]["token"] in first[0]["label"] and again["token"] in again["label"]
    finally:
        if killed:
            subprocess.run([docker_engine, "rm", "-f", *killed], capture_output=True, timeout=120)


def test_the_workers_of_one_session_share_its_token():
    """Every xdist worker of a session takes the session's run id, the one the controller gives
    each worker (xdist's PYTEST_XDIST_TESTRUNUID), so all of one suite's labels carry one token."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None:
        pytest.skip("not in an xdist worker (scripts/test.sh runs the suite in workers)")
    assert token() == run_id[:8]
