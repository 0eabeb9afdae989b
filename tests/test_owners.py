"""Owner records, stale-lock and interrupted-job recovery (sandbatch.ops.owners), without Snakemake."""

import base64
import json
import os
import socket
import subprocess
import sys

from sandbatch.ops import owners
from sandbatch.ops.owners import INCOMPLETE_DIR, LOCKS_DIR, OWNERS_DIR, locked, recover


def _lock(wd):
    (wd / LOCKS_DIR).mkdir(parents=True, exist_ok=True)
    (wd / LOCKS_DIR / "0.output.lock").write_text("results/x\n")


def _mark(wd, key):
    (wd / INCOMPLETE_DIR).mkdir(parents=True, exist_ok=True)
    (wd / INCOMPLETE_DIR / base64.urlsafe_b64encode(key.encode()).decode()).write_text("{}")


def _record(wd, pid, host=None, run="default", create_time=None):
    (wd / OWNERS_DIR).mkdir(parents=True, exist_ok=True)
    host = host or socket.gethostname()
    path = wd / OWNERS_DIR / f"{host}-{pid}.json"
    path.write_text(json.dumps({"pid": pid, "host": host, "run": run, "create_time": create_time}))
    return path


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_nothing_to_do_touches_nothing(tmp_path):
    assert recover(tmp_path) == []
    assert not (tmp_path / ".sandbatch").exists() and not (tmp_path / ".snakemake").exists()


def test_dead_owner_locks_and_interrupted_outputs_are_cleared(tmp_path):
    _lock(tmp_path)
    rec = _record(tmp_path, _dead_pid())
    done = tmp_path / "results/default/t/0/sandbox.json"
    done.parent.mkdir(parents=True)
    done.write_text("{}")
    _mark(tmp_path, "results/default/t/0/sandbox.json")
    _mark(tmp_path, "results/default/u/0/harness.json")  # never written
    notes = recover(tmp_path)
    assert any("removed stale Snakemake locks" in n for n in notes)
    assert any("2 output(s) of interrupted jobs" in n and "1 partial file(s)" in n for n in notes)
    assert not locked(tmp_path) and not done.exists()
    assert not list((tmp_path / INCOMPLETE_DIR).iterdir())
    assert not rec.exists()  # the dead owner's record is pruned


def test_live_owner_keeps_everything(tmp_path):
    _lock(tmp_path)
    _mark(tmp_path, "results/default/t/0/sandbox.json")
    # a live process that is not this one, with its real start time
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        import psutil

        _record(tmp_path, proc.pid, create_time=psutil.Process(proc.pid).create_time())
        assert recover(tmp_path) == []
        assert (tmp_path / LOCKS_DIR).exists() and list((tmp_path / INCOMPLETE_DIR).iterdir())
        assert [o.pid for o in owners.owners(tmp_path)] == [proc.pid]
    finally:
        proc.kill()
        proc.wait()
    # a reused pid (other start time) does not count as the owner
    _record(tmp_path, os.getppid(), create_time=1.0)
    assert recover(tmp_path) and not locked(tmp_path)


def test_owner_on_another_host_keeps_locks_and_says_so(tmp_path):
    _lock(tmp_path)
    _record(tmp_path, 12345, host="elsewhere")
    notes = recover(tmp_path)
    assert len(notes) == 1 and "host elsewhere" in notes[0] and "snakemake --unlock" in notes[0]
    assert (tmp_path / LOCKS_DIR).exists()


def test_register_and_unregister(tmp_path):
    path = owners.register("myrun", tmp_path)
    rec = json.loads(path.read_text())
    assert rec["pid"] == os.getpid() and rec["run"] == "myrun" and rec["create_time"]
    owners.unregister(tmp_path)
    assert not path.exists()


def test_is_snakemake():
    assert owners.is_snakemake(["/x/.venv/bin/python3", "/x/.venv/bin/snakemake", "--cores", "2"])
    assert owners.is_snakemake(["python", "-m", "snakemake", "-n"])
    assert owners.is_snakemake(["snakemake"])
    assert not owners.is_snakemake(["python", "-m", "pytest", "tests/test_snakemake.py"])
    assert not owners.is_snakemake(["python", "/x/bin/sandbatch", "stop", "snakemake"])
    assert owners.is_snakemake(["/usr/bin/python3.11", "-u", "-X", "dev", "/x/bin/snakemake"])
    # wrappers that fork the real Snakemake are not it
    for wrapper in (["timeout", "600"], ["srun", "-t", "10"], ["nohup"], ["nice", "-n", "5"], ["stdbuf", "-oL"],
                    ["env", "A=1"]):
        assert not owners.is_snakemake([*wrapper, "/x/bin/snakemake", "--cores", "2"]), wrapper
        assert not owners.is_snakemake([*wrapper, "python", "-m", "snakemake"]), wrapper
    assert not owners.is_snakemake(["python", "-c", "import snakemake"])
