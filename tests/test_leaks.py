"""No sandbox outlives a run: after agent timeouts, a SIGKILLed run and its rerun, and
injected API faults, the provider holds 0 sandboxes of the run.

Counted where the sandboxes live: on a real Docker engine (`docker ps -a` by run label)
and on the real OpenSandbox server (its sandboxes carrying the run's label; every run has
a name of its own, as the server is shared). API faults are injected by a proxy in front
of the server (tests/opensandbox_proxy.py). The agent is a hanging `opencode` (a script
uploaded as the user's own binary would be).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from sandbatch.core.ids import label_value
from sandbatch.sandbox import SandboxError, SandboxSpec

from docker_fixtures import docker_base_image, docker_engine, docker_run_label  # noqa: F401 (fixtures)
from harness_support import listed_model, sleeper
from opensandbox_proxy import FaultProxy
from real_opensandbox import real_opensandbox  # noqa: F401 (fixture)
from real_opensandbox import IMAGE, host_address, reap_run, with_provider
from suite import unique_run
from ops_util import kill_group, run, sandbatch, start, wait_for
from workflow_util import rollouts, write_config

pytestmark = pytest.mark.slow
TASKS = 2  # smoke tasks per run: two rollouts at once on --cores 2


class DockerBackend:
    """Containers of the run on the local engine."""

    def __init__(self, cli: str, image: str, run: str, model_url: str):
        self.cli, self.run = cli, run
        self.sandbox = {"provider": "docker", "default_image": image}
        self.model = {"name": "m", "base_url": model_url}

    def live(self) -> list[str]:
        out = subprocess.run([self.cli, "ps", "-a", "--filter", f"label=sandbatch.run={self.run}",
                              "--format", "{{.Names}}"], capture_output=True, text=True, check=True, timeout=60)
        return sorted(out.stdout.split())

    def agent_running(self, handle: dict) -> bool:
        """The agent has printed its first line into the sandbox (run_command's stdout file)."""
        res = subprocess.run([self.cli, "exec", handle["sandbox_id"], "test", "-s", f"{handle['tmpdir']}/agent.stdout"],
                             capture_output=True, timeout=60)
        return res.returncode == 0


class OpenSandboxBackend:
    """Sandboxes of the run on the real OpenSandbox server (reached at `domain`: the server
    itself, or a fault proxy in front of it)."""

    def __init__(self, real, run: str, model_url: str, domain: str | None = None):
        self.real, self.run = real, run
        self.sandbox = {"provider": "opensandbox", "default_image": IMAGE,
                        "opensandbox": real.options(domain, create={"retries": 1, "backoff_initial": 0.05},
                                                    operations={"retries": 1, "backoff_initial": 0.02})}
        self.model = {"name": "m", "base_url": model_url, "proxy": {"advertise_host": host_address()}}

    def live(self) -> list[str]:
        infos = with_provider(self.real.options(), lambda p: p.list({"run": label_value(self.run)}))
        return sorted(i.id for i in infos)

    def agent_running(self, handle: dict) -> bool:
        async def check(p):
            sb = await p.connect(handle["sandbox_id"], SandboxSpec(image=IMAGE))
            res = await sb.exec(["test", "-s", f"{handle['tmpdir']}/agent.stdout"], timeout=30, cwd="/")
            return res.exit_code == 0

        try:
            return with_provider(self.real.options(), check)
        except SandboxError:  # e.g. being deleted by a step that just ended
            return False


@pytest.fixture(scope="module")
def no_model():
    """A real endpoint listing model m, which a run's start asks; the hanging agent never calls it."""
    with listed_model() as url:
        yield url


@pytest.fixture(params=["docker", "opensandbox"])
def backend(request, no_model):
    if request.param == "docker":
        yield DockerBackend(request.getfixturevalue("docker_engine"), request.getfixturevalue("docker_base_image"),
                            request.getfixturevalue("docker_run_label"), no_model)  # its fixture sweeps leftovers
        return
    real = request.getfixturevalue("real_opensandbox")
    run_name = unique_run("leaks")
    yield OpenSandboxBackend(real, run_name, no_model)
    reap_run(real, run_name)  # whatever a failed test left


def hanging_opencode(tmp: Path) -> dict:
    return {"name": "opencode", "config": {"install": {"method": "upload", "source": str(sleeper(tmp / "oc"))}}}


def configfile(tmp: Path, run: str, sandbox: dict, **extra) -> str:
    cfg = {"run": run, "benchmark": {"limit": TASKS}, "sandbox": sandbox, "retries": 0, **extra}
    return str(write_config(tmp, "leaks.yaml", cfg))


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def manifest(tmp: Path, run: str) -> dict:
    return read(tmp / "results" / run / "manifest.json")


def test_agent_timeouts_leave_no_sandbox(tmp_path, backend):
    cfg = configfile(tmp_path, backend.run, backend.sandbox, harness=hanging_opencode(tmp_path),
                     model=backend.model, timeouts={"agent": 3})
    proc = run(tmp_path, "--configfile", cfg, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = rollouts(tmp_path, backend.run)
    assert len(rows) == TASKS
    for row in rows:
        h = read(tmp_path / "results" / backend.run / row["task_id"] / "0" / "harness.json")
        assert (h["status"], h["timed_out"]) == ("timeout", True), h
        assert 2.5 < h["agent_s"] < 30, h
        assert row["resolved"] is False
    # the steps deleted their own sandboxes: the aggregate found nothing to reap
    assert manifest(tmp_path, backend.run)["sandboxes_reaped"] == 0
    assert backend.live() == []


@pytest.mark.parametrize("recovery", ["rerun", "stop"])
def test_sigkilled_run_leaves_no_sandbox(tmp_path, backend, recovery):
    """SIGKILL strands the agents' sandboxes; the plain rerun, or `sandbatch stop`, deletes them."""
    # long enough to kill the run while an agent hangs, short enough for the rerun to time out
    cfg = configfile(tmp_path, backend.run, backend.sandbox, harness=hanging_opencode(tmp_path),
                     model=backend.model, timeouts={"agent": 8})
    results = tmp_path / "results" / backend.run

    def hanging_rollout():
        for path in results.glob("*/0/sandbox.json"):
            if (path.parent / "harness.json").exists():
                continue
            try:
                handle = read(path)
            except ValueError:  # being written
                continue
            if handle.get("sandbox_id") and backend.agent_running(handle):
                return path.parent
        return None

    proc = start(tmp_path, "--configfile", cfg)
    try:
        rollout = wait_for(hanging_rollout, 120, "an agent running in its sandbox", proc)
    finally:
        kill_group(proc)
    assert not (rollout / "harness.json").exists(), "the agent timed out before the kill"
    killed = read(rollout / "sandbox.json")["sandbox_id"]
    left = backend.live()
    assert killed in left, "SIGKILL gives the run no chance to delete its agent's sandbox"

    if recovery == "stop":
        out = sandbatch("stop", backend.run, "-d", str(tmp_path))
        assert out.returncode == 0, out.stdout + out.stderr
        # at least those counted: a create the kill interrupted may have finished since
        # (a Docker sandbox's network gate, `<id>-gate`, is deleted with it and not counted apart)
        deleted = re.search(r"deleted (\d+) sandbox", out.stdout)
        sandboxes = [name for name in left if not name.endswith("-gate")]
        assert deleted and int(deleted[1]) >= len(sandboxes), out.stdout
        assert backend.live() == []
        return
    again = run(tmp_path, "--configfile", cfg, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "removed stale Snakemake locks" in again.stderr
    assert len(rollouts(tmp_path, backend.run)) == TASKS
    assert read(rollout / "harness.json")["status"] == "timeout"
    # the half-used sandbox was replaced, not reused, and deleted on the way
    assert read(rollout / "harness.json")["sandbox"]["recreated"] == 1
    assert backend.live() == []


def test_api_faults_leave_no_sandbox(tmp_path, real_opensandbox, no_model):
    """A create the client gives up on while the server makes it anyway, whose clean-up
    delete fails beyond its retries, and a delete that fails once.

    One sandbox at a time (concurrency 1), so the faults hit API calls in a known order:
    the first create is lost (its rollout fails in the sandbox step) and the provider's
    delete of the stray fails, which leaves it to the end-of-run reaper; the next delete
    (the other rollout's patch step) is retried.
    """
    with FaultProxy(real_opensandbox.url) as proxy:
        backend = OpenSandboxBackend(real_opensandbox, unique_run("leaks-faults"), no_model, proxy.domain)
        try:
            options = backend.sandbox["opensandbox"]
            options["connection"]["request_timeout"] = 5
            options["create"]["retries"] = 0
            proxy.add_fault(op="create", action="delay", seconds=10, count=1)
            proxy.add_fault(op="delete", action="status", status=500, count=options["operations"]["retries"] + 1)
            proxy.add_fault(op="delete", action="status", status=500, count=1)
            cfg = configfile(tmp_path, backend.run, backend.sandbox, concurrency=1)
            proc = run(tmp_path, "--configfile", cfg, timeout=300)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            stats = proxy.stats()
            assert stats["faults_pending"] == [], stats["faults_pending"]
            rows = sorted((r["status"], r["failed_phase"]) for r in rollouts(tmp_path, backend.run))
            assert rows == [("infra_error", "sandbox"), ("ok", None)], rows
            assert manifest(tmp_path, backend.run)["sandboxes_reaped"] == 1  # the lost create's sandbox
            assert backend.live() == []
            # the stray, and the agent and grading sandboxes of the rollout that got one
            assert stats["requests"]["create"] == 3
        finally:
            reap_run(real_opensandbox, backend.run)
