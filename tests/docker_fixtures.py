"""Fixtures for tests that need a real Docker engine and the local base image.

Import the fixtures into a test module (`from docker_fixtures import docker_engine, ...`).
They skip, with the reason and the fix, when no engine answers or the image is missing (and
fail under SANDBATCH_REQUIRE_SERVICES=1, see services.py);
`bash scripts/services/docker.sh && bash scripts/build-base-image.sh` provides both.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from services import missing
from suite import unique_run

BASE_IMAGE = os.environ.get("SANDBATCH_BASE_IMAGE", "sandbatch/base:bookworm")


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def _startup_failure() -> str:
    """Why scripts/services/docker.sh could not start an engine on this machine, if it said."""
    path = Path(os.environ.get("SANDBATCH_CACHE", "/var/cache/sandbatch")) / "docker-unavailable"
    try:
        return _last_line(path.read_text()) if path.is_file() else ""
    except OSError:
        return ""


@pytest.fixture(scope="session")
def docker_engine() -> str:
    """The docker CLI, once `docker info` answers; skips otherwise."""
    cli = shutil.which("docker")
    if cli is None:
        missing("no docker CLI on PATH; run `bash scripts/services/docker.sh` (as root)")
    try:
        res = subprocess.run([cli, "info", "--format", "{{.ServerVersion}}"],
                             capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        missing("no Docker engine: `docker info` hung for 60 s")
    if res.returncode != 0:
        why = _startup_failure()
        missing(f"no Docker engine (scripts/services/docker.sh: {why})" if why else
                    f"no Docker engine: `docker info` failed ({_last_line(res.stderr)}); "
                    "run `bash scripts/services/docker.sh` (as root)")
    return cli


@pytest.fixture(scope="session")
def docker_base_image(docker_engine: str) -> str:
    """The locally built base image; skips when it has not been built."""
    res = subprocess.run([docker_engine, "image", "inspect", "--format", "{{.Id}}", BASE_IMAGE],
                         capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        missing(f"base image {BASE_IMAGE} is missing; run `bash scripts/build-base-image.sh`")
    return BASE_IMAGE


@pytest.fixture
def docker_run_label(docker_engine: str):
    """A run label unique to one test of this suite; every docker sandbox carrying it is deleted
    afterwards."""
    from sandbatch.sandbox.docker import DockerProvider

    label = unique_run("test")
    yield label

    async def sweep() -> None:
        provider = DockerProvider()
        for info in await provider.list({"run": label}):
            await provider.delete(info.id)

    asyncio.run(sweep())


def containers(cli: str, **labels: str) -> list[str]:
    """Ids of the engine's containers (sandboxes and their network gates) carrying every one of
    `labels` (`run=`: a run label of this suite's own, `suite.unique_run`; `instance=`: one run
    instance's id): what a "nothing left" check counts, never another run's or suite's."""
    assert labels and all(labels.values()), f"no labels to select by: {labels}"
    filters = [arg for key, value in labels.items() for arg in ("--filter", f"label=sandbatch.{key}={value}")]
    return subprocess.run([cli, "ps", "-aq", *filters], capture_output=True, text=True, check=True,
                          timeout=60).stdout.split()


class PidsCgroup:
    """The kernel's counters of a container's pids cgroup, read on the host (cgroup v1 or v2):
    what a test waits on instead of guessing from inside the container whether a fork fails."""

    def __init__(self, cli: str, container: str):
        pid = subprocess.run([cli, "container", "inspect", "--format", "{{.State.Pid}}", container],
                             capture_output=True, text=True, check=True).stdout.strip()
        lines = [ln.split(":", 2) for ln in Path(f"/proc/{pid}/cgroup").read_text().splitlines()]
        v1 = [path for _, controllers, path in lines if "pids" in controllers.split(",")]
        candidates = [Path("/sys/fs/cgroup/pids" + v1[0])] if v1 else []
        candidates += [Path("/sys/fs/cgroup" + path) for hid, _, path in lines if hid == "0"]  # v2
        found = [c for c in candidates if (c / "pids.max").is_file()]
        assert found, f"no pids cgroup of container {container} (pid {pid}) among {candidates}"
        self.dir = found[0]

    def max(self) -> int:
        return int((self.dir / "pids.max").read_text())

    def read(self) -> dict[str, int]:
        """pids.current, and `refused`: the forks refused at the limit (pids.events' max counter)."""
        events = dict(ln.split() for ln in (self.dir / "pids.events").read_text().splitlines())
        return {"current": int((self.dir / "pids.current").read_text()), "refused": int(events["max"])}

    def wait(self, done, bound: float, what: str) -> dict[str, int]:
        """Poll the counters until `done(counters)`, at most `bound` seconds; they are returned."""
        deadline = time.monotonic() + bound
        while not done(seen := self.read()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {bound:.0f} s; {self.dir} last read {seen}")
            time.sleep(0.1)
        return seen


OPENCODE_PREFIX = "/opt/opencode"  # where agent_image holds OpenCode: bin/opencode under it


@pytest.fixture(scope="session")
def agent_image(docker_base_image: str) -> str:
    """The base image plus what a real agent run needs and the base lacks: OpenCode (npm
    `opencode-ai` at the version the harness pins, installed under OPENCODE_PREFIX; run it
    with `install: {method: path}`) and `python` (SWE-bench Pro images have it; their
    run_scripts call it)."""
    from sandbatch.harness.opencode import OpenCodeHarness

    return npm_agent_image(docker_base_image, "opencode", f"opencode-ai@{OpenCodeHarness.default_version}",
                           OPENCODE_PREFIX, setup="ln -sf /usr/bin/python3 /usr/local/bin/python && ")


def npm_agent_image(base_image: str, name: str, spec: str, prefix: str, setup: str = "") -> str:
    """`base_image` with the npm package `spec` installed under `prefix` (bin/`name` under it),
    `setup` run before its `--version`. Built once on a machine (its tag names the recipe), by
    the first test process that needs it.

    The package is installed by the host's npm into the build context (the agents' packages
    carry self-contained binaries), so the image needs no node and the build no network."""
    import hashlib
    import tempfile

    from services import need_program
    from shared import built_once

    need_program("npm", "run scripts/services/node.sh (as root)")
    version = spec.rpartition("@")[2]
    dockerfile = f"FROM {base_image}\nCOPY {name}/ {prefix}/\nRUN {setup}{prefix}/bin/{name} --version\n"
    base_id = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", base_image],
                             capture_output=True, text=True, check=True).stdout.strip()
    recipe = hashlib.sha256(f"{base_id}\n{dockerfile}".encode()).hexdigest()[:12]  # a new base, a new image
    tag = f"sandbatch/test-agent:{name}-{version}-{recipe}"
    with built_once(f"agent-image-{name}-{version}", bound=600 + 900):  # npm's and the build's timeouts
        if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0:
            return tag
        with tempfile.TemporaryDirectory(prefix="sandbatch-agent-image-") as tmp:
            context = Path(tmp)
            npm = subprocess.run(["npm", "install", "-g", "--no-audit", "--no-fund", "--prefix",
                                  str(context / name), spec], capture_output=True, text=True, timeout=600)
            assert npm.returncode == 0, f"npm install {spec}: {npm.stderr[-1500:]}"
            (context / "Dockerfile").write_text(dockerfile)
            build = subprocess.run(["docker", "build", "-q", "-t", tag, str(context)], capture_output=True,
                                   text=True, timeout=900)
        assert build.returncode == 0, f"docker build {tag}: {build.stderr[-1500:]}"
    return tag


NO_PYTHON = ("RUN rm -rf /usr/bin/python3* /usr/lib/python3* /usr/local/lib/python3* /usr/local/bin/python* "
             "&& ! command -v python3 && ! command -v python\n")


@pytest.fixture(scope="session")
def no_python_image(docker_engine: str, docker_base_image: str, tmp_path_factory) -> str:
    """The base image without any Python, built locally (nothing is pulled)."""
    context = tmp_path_factory.mktemp("no-python")
    (context / "Dockerfile").write_text(f"FROM {docker_base_image}\n{NO_PYTHON}")
    tag = "sandbatch/test-no-python:latest"
    proc = subprocess.run([docker_engine, "build", "-q", "-t", tag, str(context)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return tag
