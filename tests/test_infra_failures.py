"""A command whose sandbox was killed, stopped or deleted under it, or that could not reach
its sandbox, is an infrastructure failure (InfraError: retried, reported apart), never the
command's own exit status; a command that kills itself inside a live sandbox keeps its status.

On every provider: local, a real Docker engine, the real OpenSandbox server.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time

import pytest

from docker_fixtures import docker_base_image, docker_engine, docker_run_label  # noqa: F401 (fixtures)
from real_opensandbox import real_opensandbox  # noqa: F401 (fixture)
from suite import unique_run
from sandbatch.core.errors import InfraError
from sandbatch.sandbox import SandboxGone, SandboxSpec
from sandbatch.sandbox.local import LocalProvider

STARTED = "/tmp/sandbatch-test-started"


async def _wait_started(sandbox, path: str, timeout: float = 60) -> None:
    """Until the long command has written `path` (no fixed sleeps: the machine may be slow)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if (await sandbox.exec(f"test -e {path}", timeout=30)).ok:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{path} never appeared")


async def _killed_under(sandbox, path: str, kill) -> BaseException | None:
    """Run a long command, `kill()` the sandbox once it runs; what the exec raised (None: nothing)."""
    running = asyncio.ensure_future(sandbox.exec(f"touch {path}; sleep 300", timeout=600))
    try:
        await _wait_started(sandbox, path)
        await kill()
        try:
            await asyncio.wait_for(running, 120)
        except InfraError as exc:
            return exc
        return None
    finally:
        running.cancel()


# --- local ------------------------------------------------------------------------------------
def test_local_sandbox_deleted_under_a_command_is_infra(tmp_path):
    async def main():
        provider = LocalProvider({"root": str(tmp_path / "sb")})
        sb = await provider.create(SandboxSpec(labels={"run": "t"}))
        # the command notices its sandbox is gone (local processes are not killed by a delete)
        running = asyncio.ensure_future(sb.exec(
            "touch ../tmp/started; while [ -e ../meta.json ]; do sleep 0.05; done; exit 3", timeout=120))
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(sb.tmpdir, "started")):
            assert time.monotonic() < deadline and not running.done(), f"the command never started: {running}"
            await asyncio.sleep(0.05)
        await provider.delete(sb.id)
        with pytest.raises(SandboxGone):
            await running
        # in a live sandbox the same exit status is the command's own
        sb2 = await provider.create(SandboxSpec(labels={"run": "t"}))
        assert (await sb2.exec("exit 3", timeout=30)).exit_code == 3
        assert (await sb2.exec("kill -9 $$", timeout=30)).exit_code in (137, -9)
        await provider.delete(sb2.id)

    asyncio.run(main())


# --- docker -----------------------------------------------------------------------------------
@pytest.fixture
def docker_sandbox(docker_engine, docker_base_image, docker_run_label):
    from sandbatch.sandbox.docker import DockerProvider

    async def make():
        return await DockerProvider().create(SandboxSpec(image=docker_base_image, workdir="/",
                                                         labels={"run": docker_run_label}, ttl_seconds=600))
    return make


@pytest.mark.parametrize("how", ["rm", "kill", "stop"])
def test_docker_sandbox_killed_under_a_command_is_infra(docker_engine, docker_sandbox, how):
    """`docker rm -f` (a reaper), `docker kill` (exit 137), `docker stop` (SIGTERM first: 143)."""
    async def main():
        sb = await docker_sandbox()
        args = {"rm": ["rm", "-f"], "kill": ["kill"], "stop": ["stop", "-t", "1"]}[how]

        async def kill():
            await asyncio.to_thread(subprocess.run, [docker_engine, *args, sb.id], check=True,
                                    capture_output=True, timeout=120)
        exc = await _killed_under(sb, STARTED, kill)
        await sb.delete()
        return exc

    exc = asyncio.run(main())
    assert isinstance(exc, SandboxGone), exc


def test_docker_command_that_kills_itself_keeps_its_status(docker_sandbox):
    async def main():
        sb = await docker_sandbox()
        try:
            return [(await sb.exec(cmd, timeout=60)).exit_code for cmd in ("kill -9 $$", "kill -TERM $$", "exit 1")]
        finally:
            await sb.delete()

    assert asyncio.run(main()) == [137, 143, 1]


def test_docker_engine_unreachable_is_infra(docker_sandbox, tmp_path):
    """A docker CLI that cannot reach its engine prints an error and exits 1: never a test failure."""
    async def main():
        sb = await docker_sandbox()
        try:
            sb.provider.options["host"] = f"unix://{tmp_path}/no-engine.sock"
            with pytest.raises(InfraError) as info:
                await sb.exec("echo hi", timeout=30)
            # and what a command prints about the engine is not taken for the engine's word
            sb.provider.options.pop("host")
            res = await sb.exec("echo 'Cannot connect to the Docker daemon' >&2; exit 1", timeout=30)
            assert res.exit_code == 1
            return info.value
        finally:
            sb.provider.options.pop("host", None)
            await sb.delete()

    exc = asyncio.run(main())
    assert "engine" in str(exc).lower() or "docker" in str(exc).lower(), exc


# --- the real OpenSandbox server ----------------------------------------------------------------
def _os_options(server) -> dict:
    return {
        "connection": {"domain": server.domain, "protocol": server.protocol, "api_key_env": "SANDBATCH_TEST_OS_KEY",
                       "request_timeout": 30},
        "create": {"ready_timeout": 120},
        "probe": {"timeout": 120},
        "operations": {"timeout": 60},
        "network_policy": False,  # the test server has no egress sidecar (real_opensandbox.py)
    }


def test_opensandbox_sandbox_deleted_under_a_command_is_infra(real_opensandbox, docker_base_image, monkeypatch):
    from sandbatch.sandbox.opensandbox import OpenSandboxProvider

    monkeypatch.setenv("SANDBATCH_TEST_OS_KEY", real_opensandbox.key)
    run = unique_run("test")

    async def main():
        async with OpenSandboxProvider(_os_options(real_opensandbox)) as provider:
            sb = await provider.create(SandboxSpec(image=docker_base_image, workdir="/", labels={"run": run},
                                                   ttl_seconds=600))
            try:
                codes = [(await sb.exec(cmd, timeout=60)).exit_code for cmd in ("kill -9 $$", "exit 1")]
                exc = await _killed_under(sb, STARTED, lambda: provider.delete(sb.id))
                return codes, exc
            finally:
                for info in await provider.list({"run": run}):
                    await provider.delete(info.id)

    codes, exc = asyncio.run(main())
    assert codes[1] == 1 and codes[0] in (137, -1), codes
    assert isinstance(exc, InfraError), exc
