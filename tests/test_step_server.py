"""The step server: steps run in its forked children, with the job's stdio, exit code and
signals; a killed job still cleans up; without a server a step runs in its own process."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from ops_util import SNAKEMAKE, run, sandboxes, smoke_rows, start, wait_for, write_tasks
from workflow_util import REPO

SERVER_MODULE = "sandbatch.steps.forkserver"
# exit 99: the client found no server and would have run the step itself
DELEGATE = ("import sys; from sandbatch.steps.entrypoint import delegate; sys.argv[0] = 'convert.py'; "
            "code = delegate('convert'); sys.exit(99 if code is None else code)")


def _serve(name: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", SERVER_MODULE, name, "sandbatch.steps.convert"])

    def up():
        with socket.socket(socket.AF_UNIX) as s:
            return s.connect_ex("\0" + name) == 0

    wait_for(up, 30, "the step server to listen", proc)
    return proc


def _client(name: str | None, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SANDBATCH_STEP_SERVER"}
    if name:
        env["SANDBATCH_STEP_SERVER"] = name
    return subprocess.run([sys.executable, "-c", DELEGATE, *args], env=env, capture_output=True, text=True,
                          timeout=60, cwd=REPO)


def test_a_step_goes_to_the_server_with_its_stdio_and_exit_code(tmp_path):
    name = f"sandbatch-test-{uuid.uuid4().hex}"
    server = _serve(name)
    try:
        bad = _client(name, "--config", str(tmp_path / "missing.json"), "--task", "t", "--repeat", "0")
        assert bad.returncode == 2, (bad.returncode, bad.stderr)
        assert bad.stderr.strip().splitlines() == [
            f"sandbatch: error: --config {tmp_path / 'missing.json'}: No such file or directory; pass the run's "
            "settings file, results/<run>/_settings/run.json (the workflow writes it)"]
        usage = _client(name, "--help")
        assert usage.returncode == 0 and usage.stdout.startswith("usage: convert.py"), usage
    finally:
        server.terminate()
        assert server.wait(20) == 0
    # gone: the client runs nothing itself (exit 99 here) and the script would run the step
    assert _client(name, "--help").returncode == 99
    assert _client(None, "--help").returncode == 99


# an import that holds the server until the test releases it: the order of the server's work is
# read from files, not guessed from how long a client took
HELD_IMPORT = """import os, time
open({started!r}, "w").close()
deadline = time.monotonic() + 300
while not os.path.exists({release!r}):
    assert time.monotonic() < deadline, "never released"
    time.sleep(0.05)
"""
# the client, noting when it is connected (in the server's backlog while the server imports)
NOTED_DELEGATE = ("import sys; from sandbatch.steps import entrypoint; note = sys.argv.pop(1); real = entrypoint._connect\n"
                  "def connect(name):\n    sock = real(name); open(note, 'w').close(); return sock\n"
                  "entrypoint._connect = connect\n" + DELEGATE)


def test_steps_are_served_between_the_imports_after_then(tmp_path):
    # the modules after --then are imported one by one between clients: a step waiting for
    # the server is not held up by imports only later steps need
    held = {m: (tmp_path / f"{m}.started", tmp_path / f"{m}.release") for m in ("slow_import_a", "slow_import_b")}
    for module, (started, release) in held.items():
        (tmp_path / f"{module}.py").write_text(HELD_IMPORT.format(started=str(started), release=str(release)))
    name = f"sandbatch-test-{uuid.uuid4().hex}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", SERVER_MODULE, name, "sandbatch.steps.convert", "--then",
                             "slow_import_a", "slow_import_b"], env=env)
    client = None
    try:
        wait_for(held["slow_import_a"][0].exists, 60, "the server to start importing slow_import_a", proc)
        client_env = {**os.environ, "SANDBATCH_STEP_SERVER": name}
        connected = tmp_path / "client.connected"
        client = subprocess.Popen([sys.executable, "-c", NOTED_DELEGATE, str(connected), "--help"], env=client_env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        wait_for(connected.exists, 60, "the client to connect while slow_import_a is under way", client)
        held["slow_import_a"][1].touch()
        try:  # slow_import_b stays held: a server that imported it before serving never answers
            out, err = client.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError("the client was not served within 60 s while slow_import_b was held; "
                                 f"slow_import_b started: {held['slow_import_b'][0].exists()}") from None
        assert client.returncode == 0 and out.startswith("usage: convert.py"), (client.returncode, out, err)
    finally:
        for _, release in held.values():
            release.touch()
        if client is not None and client.poll() is None:
            client.kill()
        proc.terminate()
        assert proc.wait(20) == 0


def _server_of(snakemake: psutil.Process) -> psutil.Process | None:
    try:
        return next((p for p in snakemake.children() if SERVER_MODULE in " ".join(p.cmdline())), None)
    except psutil.NoSuchProcess:
        return None


@pytest.mark.slow
def test_killed_job_step_cleans_up_and_the_rerun_completes(tmp_path):
    """SIGKILL the grade job's process: its step (a child of the server) is told, deletes its
    sandbox and says so in the job's log; the server ends with the run; a rerun completes."""
    flag, hold = tmp_path / "slow", tmp_path / "hold"
    flag.touch()
    hold.touch()
    rows = smoke_rows()[:2]
    rows[0]["test_cmd"] = f"if [ -e {flag} ]; then sleep 300; fi; {rows[0]['test_cmd']}"
    # the other rollout keeps the run going until the checks are done
    rows[1]["test_cmd"] = f"while [ -e {hold} ]; do sleep 0.1; done; {rows[1]['test_cmd']}"
    tasks = write_tasks(tmp_path / "tasks.jsonl", rows)
    args = ["--config", f"benchmark={{'tasks': '{tasks}'}}", "retries=0"]
    proc = start(tmp_path, *args)
    try:
        sm = psutil.Process(proc.pid)
        server = wait_for(lambda: _server_of(sm), 60, "the step server", proc)
        found = wait_for(lambda: sandboxes(tmp_path, "grade", "smoke__calc-1"), 120, "a grading sandbox", proc)
        sandbox = found[0]
        client = next(p for p in sm.children(recursive=True)
                      if any(a.endswith("workflow/scripts/grade.py") for a in p.cmdline())
                      and "smoke__calc-1" in p.cmdline())
        steps = server.children()
        assert steps, "the grade step does not run in the step server"
        flag.unlink()
        client.send_signal(signal.SIGKILL)
        # a step in the job's own process would have died without a word, its sandbox left
        wait_for(lambda: not sandbox.exists(), 30, f"the killed job's step to delete {sandbox.name}", proc)
        log = tmp_path / "results/default/smoke__calc-1/0/logs/grade.log"
        wait_for(lambda: "stopped by a signal" in log.read_text(), 30, "the step's own stop message", proc)
        hold.unlink()
        assert proc.wait(timeout=300) != 0  # the killed job failed (no retries)
    finally:
        if proc.poll() is None:
            proc.kill()
    psutil.wait_procs([server], timeout=10)
    assert not server.is_running(), "the step server outlived its run"

    done = run(tmp_path, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    rollouts = [json.loads(l) for l in (tmp_path / "results/default/rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 2 and all(r["resolved"] for r in rollouts)


def test_the_aggregate_runs_in_the_step_server_and_the_run_lists_its_sandboxes_once(tmp_path):
    """A local run's aggregate is the server's sixth step for one rollout (no Python start-up,
    nothing imported), and its reap spares the run's end a second list of the sandboxes."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", smoke_rows()[:1])
    done = run(tmp_path, "--config", f"benchmark={{'tasks': '{tasks}'}}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sandbatch: step server: 6 steps;" in done.stderr, done.stderr[-3000:]
    manifest = json.loads((tmp_path / "results/default/manifest.json").read_text())
    assert manifest["sandboxes_reaped"] == 0
    assert [json.loads(line)["resolved"] for line in
            (tmp_path / "results/default/rollouts.jsonl").read_text().splitlines()] == [True]
    from sandbatch.ops.workflow import reaped_since

    assert reaped_since(tmp_path / "results/default", 0) and not reaped_since(tmp_path / "results/default",
                                                                               time.time() + 60)


def test_no_step_server_when_disabled(tmp_path):
    """SANDBATCH_NO_STEP_SERVER=1: every step runs in its own job process, same results."""
    rows = smoke_rows()[:1]
    tasks = write_tasks(tmp_path / "tasks.jsonl", rows)
    env = {**os.environ, "SANDBATCH_NO_STEP_SERVER": "1"}
    seen = []
    proc = subprocess.Popen([*SNAKEMAKE, "-d", str(tmp_path), "--config", f"benchmark={{'tasks': '{tasks}'}}"],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sm = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            seen += [" ".join(p.cmdline()) for p in sm.children()]
        except psutil.Error:
            pass
        time.sleep(0.05)
    assert proc.returncode == 0
    assert not any(SERVER_MODULE in c for c in seen)
    rollout = json.loads((tmp_path / "results/default/rollouts.jsonl").read_text())
    assert rollout["resolved"]
