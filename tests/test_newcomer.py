"""A newcomer's first hour: a clone of this commit in an empty directory, with no sibling
directories (no ../shared), on a machine whose registries may be out of reach.

The README's run command sets up a fresh venv there and reports 5/5 on the bundled smoke
benchmark. The OpenSandbox service script gets the server's execd image without ../shared:
from the engine when it is already there (the server starts on a port of its own and is
stopped), and with neither the image, ../shared nor a reachable registry (a registry
address nothing listens on) it says in one line which of them to provide.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from docker_fixtures import docker_engine  # noqa: F401
from services import missing
from sandbatch import REPO_ROOT

pytestmark = pytest.mark.slow

EXECD_IMAGES = ("opensandbox/execd:v1.1.0", "opensandbox-local/execd:dev")  # official, imported from ../shared
KEY = "newcomer-key"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def user_env(**extra: str) -> dict[str, str]:
    """A user's shell: none of this project's or the test run's variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "SANDBATCH_", "OPEN_SANDBOX_", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if "/.venv/" not in p)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A git clone of this commit, alone in an empty directory."""
    head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip(f"{REPO_ROOT} is not a git checkout")
    root = tmp_path_factory.mktemp("newcomer")
    dest = root / "sandbatch"
    for cmd in (["git", "clone", "-q", str(REPO_ROOT), str(dest)],
                ["git", "-C", str(dest), "checkout", "-q", "--detach", head.stdout.strip()]):
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
    assert [p.name for p in root.iterdir()] == ["sandbatch"]  # no ../shared beside it
    return dest


@pytest.fixture(scope="module")
def server_state(tmp_path_factory) -> Path:
    """The service script's state directory (its venv is installed once for this module)."""
    return tmp_path_factory.mktemp("opensandbox-state")


def service_script(clone: Path, state: Path, port: int, **extra: str) -> subprocess.CompletedProcess:
    env = user_env(SANDBATCH_TEST_OPENSANDBOX_PORT=str(port), SANDBATCH_TEST_OPENSANDBOX_KEY=KEY,
                   SANDBATCH_TEST_OPENSANDBOX_STATE=str(state), **extra)
    return subprocess.run(["bash", "scripts/services/opensandbox.sh"], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=900)


def test_service_script_without_shared_or_registry_names_what_to_provide(clone, server_state,
                                                                          docker_engine):  # noqa: F811
    registry = f"127.0.0.1:{free_port()}"  # a registry nothing answers at
    res = service_script(clone, server_state, free_port(),
                         SANDBATCH_OPENSANDBOX_EXECD_IMAGE=f"{registry}/opensandbox/execd:v1.1.0")
    assert res.returncode == 1, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert re.fullmatch(
        rf"opensandbox\.sh: no execd image: {registry}/opensandbox/execd:v1\.1\.0 not on the engine, "
        r"\.\./shared/opensandbox-server/execd-image\.tar\.gz is missing, and pulling .+ failed \(.+\); "
        r"provide one of them \(docker pull/load the image, or set SANDBATCH_OPENSANDBOX_SERVER_DIR to a "
        r"directory holding execd-image\.tar\.gz\)", lines[0]), lines[0]
    assert not (server_state / "server.toml").exists()  # nothing started


def serves_and_stops(res: subprocess.CompletedProcess, port: int, image: str, state: Path) -> None:
    """The script started a server on `port` with `image` that answers with its key; stop it."""
    assert res.returncode == 0, res.stderr[-3000:]
    started = re.fullmatch(rf"pid=(\d+) url=http://127\.0\.0\.1:{port} key={KEY}", res.stdout.strip())
    assert started, res.stdout
    pid = int(started.group(1))
    try:
        assert f'execd_image = "{image}"' in (state / "server.toml").read_text()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as resp:
            assert resp.status == 200
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/sandboxes",
                                         headers={"OPEN-SANDBOX-API-KEY": KEY})
        with urllib.request.urlopen(request, timeout=30) as resp:
            assert resp.status == 200  # the API answers with the key the script was given
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/sandboxes", timeout=30)
        assert refused.value.code == 401
    finally:
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]:
                break
            time.sleep(0.1)


def on_engine(image: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0


def test_service_script_starts_the_server_from_an_image_on_the_engine(clone, server_state,
                                                                     docker_engine):  # noqa: F811
    have = [i for i in EXECD_IMAGES if on_engine(i)]
    if not have:
        missing(f"no execd image on the engine ({' or '.join(EXECD_IMAGES)}); run scripts/services/opensandbox.sh")
    port = free_port()
    t0 = time.monotonic()
    res = service_script(clone, server_state, port)
    took = time.monotonic() - t0
    serves_and_stops(res, port, have[0], server_state)
    print(f"\nservice script from a clone without ../shared: server up in {took:.0f} s")


def test_service_script_imports_the_image_from_a_server_dir(clone, server_state, docker_engine):  # noqa: F811
    """The second source: a directory holding execd-image.tar.gz (../shared/opensandbox-server/ on
    this project's machines), here named by SANDBATCH_OPENSANDBOX_SERVER_DIR, imported under a
    name of this test's own."""
    bundle_dir = REPO_ROOT.parent / "shared" / "opensandbox-server"
    if not (bundle_dir / "execd-image.tar.gz").is_file():
        pytest.skip(f"{bundle_dir}/execd-image.tar.gz is not on this machine")
    image = f"sandbatch-test/execd-{uuid.uuid4().hex[:8]}:imported"
    port = free_port()
    try:
        res = service_script(clone, server_state, port, SANDBATCH_OPENSANDBOX_SERVER_DIR=str(bundle_dir),
                             SANDBATCH_OPENSANDBOX_EXECD_IMAGE=image)
        assert on_engine(image), res.stderr[-2000:]
        serves_and_stops(res, port, image, server_state)
    finally:
        subprocess.run(["docker", "rmi", "-f", image], capture_output=True)


def test_readme_run_command_in_a_fresh_clone(clone):
    """`bash scripts/run.sh`, as the README's Quick start says: a fresh .venv, then the default run."""
    t0 = time.monotonic()
    res = subprocess.run(["bash", "scripts/run.sh"], cwd=clone, env=user_env(), capture_output=True, text=True,
                         timeout=1500)
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    report = (clone / "results" / "default" / "report.md").read_text()
    assert re.search(r"\| resolved \(all rollouts\) \| 100\.0% \(5/5\) \|", report), report
    print(f"\nREADME run command in a fresh clone (venv + 5 smoke rollouts): {took:.0f} s")
