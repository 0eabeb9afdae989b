"""A sandbox gets nothing of the step's environment: not the upstream model key, not
sandbatch's own SANDBATCH_* settings, not the runner's virtualenv (an agent's `pip install`
lands in the sandbox). On every provider: local, a real Docker engine, the real OpenSandbox server.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
import zipfile
from pathlib import Path

import pytest

from docker_fixtures import docker_base_image, docker_engine  # noqa: F401 (fixtures)
from real_opensandbox import real_opensandbox  # noqa: F401 (fixture)
from suite import unique_run
from sandbatch.sandbox import SandboxSpec

SECRET = "sk-upstream-" + uuid.uuid4().hex
PRINT_ENV = "env; echo PATH=$PATH"


@pytest.fixture
def step_env(monkeypatch):
    """The environment of a step that holds the upstream key and sandbatch settings."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("SANDBATCH_UPSTREAM_KEY", SECRET)
    monkeypatch.setenv("SANDBATCH_PROGRESS_EVERY", "5")


def _env_of(provider, spec: SandboxSpec) -> str:
    async def go():
        sb = await provider.create(spec)
        try:
            return (await sb.exec(PRINT_ENV, timeout=120, cwd="/tmp")).stdout
        finally:
            await sb.delete()
            await provider.aclose()
    return asyncio.run(go())


def _assert_clean(text: str) -> None:
    assert SECRET not in text
    assert "SANDBATCH_PROGRESS_EVERY" not in text and "SANDBATCH_UPSTREAM_KEY" not in text


def test_local_sandbox_environment_is_minimal(step_env, tmp_path):
    from sandbatch.sandbox.local import LocalProvider

    text = _env_of(LocalProvider({"root": str(tmp_path / "sb")}), SandboxSpec(env={"TASK_VAR": "1"}))
    _assert_clean(text)
    env = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    assert env["TASK_VAR"] == "1"
    assert env["HOME"].startswith(str(tmp_path / "sb")) and env["XDG_CONFIG_HOME"].startswith(env["HOME"])
    runner_bin = str(Path(sys.executable).parent)
    assert runner_bin not in env["PATH"].split(":"), env["PATH"]


def test_local_pip_install_lands_in_the_sandbox(tmp_path):
    """The sandbox's python sees the runner's packages (pytest) but installs into itself."""
    from sandbatch.sandbox.local import LocalProvider

    # a minimal wheel (pip installs it offline, nothing to build)
    pkg = tmp_path / "sandbatch_probe_pkg-0.1-py3-none-any.whl"
    info = "sandbatch_probe_pkg-0.1.dist-info"
    with zipfile.ZipFile(pkg, "w") as whl:
        whl.writestr("sandbatch_probe_pkg.py", "X = 1\n")
        whl.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: sandbatch-probe-pkg\nVersion: 0.1\n")
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{info}/RECORD", "")

    async def go():
        provider = LocalProvider({"root": str(tmp_path / "sb")})
        sb = await provider.create(SandboxSpec())
        try:
            res = await sb.exec(f"python3 -m pip install --no-index -q {pkg} && "
                                "python3 -c 'import sandbatch_probe_pkg, pytest; print(sandbatch_probe_pkg.__file__)'",
                                timeout=300)
            return sb.root, res
        finally:
            await sb.delete()

    root, res = asyncio.run(go())
    assert res.ok, res.stderr[-2000:]
    assert res.stdout.strip().startswith(str(root)), res.stdout
    import importlib.util
    assert importlib.util.find_spec("sandbatch_probe_pkg") is None  # not in the runner's venv


def test_docker_sandbox_gets_nothing_of_the_step(step_env, docker_base_image):
    from sandbatch.sandbox.docker import DockerProvider

    _assert_clean(_env_of(DockerProvider(), SandboxSpec(image=docker_base_image, workdir="/",
                                                        labels={"run": unique_run("env")})))


def test_opensandbox_sandbox_gets_nothing_of_the_step(step_env, real_opensandbox, docker_base_image, monkeypatch):
    from sandbatch.sandbox.opensandbox import OpenSandboxProvider

    monkeypatch.setenv("SANDBATCH_TEST_OS_KEY", real_opensandbox.key)
    options = {"connection": {"domain": real_opensandbox.domain, "protocol": real_opensandbox.protocol,
                              "api_key_env": "SANDBATCH_TEST_OS_KEY", "request_timeout": 30},
               "create": {"ready_timeout": 120}, "probe": {"timeout": 120}, "operations": {"timeout": 60},
               "network_policy": False}  # the test server has no egress sidecar (real_opensandbox.py)
    _assert_clean(_env_of(OpenSandboxProvider(options), SandboxSpec(
        image=docker_base_image, workdir="/", labels={"run": unique_run("env")})))
