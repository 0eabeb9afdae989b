"""The docker provider against a real Docker engine and the locally built base image."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import time
from datetime import datetime, timezone

import pytest

from docker_fixtures import PidsCgroup, docker_base_image, docker_engine, docker_run_label  # noqa: F401 (fixtures)
from sandbatch.core import config
from sandbatch.core.errors import InfraError, UserError
from sandbatch.sandbox import get_provider, provider_class
from sandbatch.sandbox.base import SandboxError, SandboxGone, SandboxSpec
from sandbatch.sandbox.docker import DEFAULTS, DockerProvider, SandboxOOM, cpu_count, memory_bytes


def run(coro):
    return asyncio.run(coro)


def inspect(cli: str, name: str) -> dict:
    out = subprocess.run([cli, "container", "inspect", name], capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]


@pytest.fixture
def spec(docker_base_image, docker_run_label):
    def make(**kw) -> SandboxSpec:
        labels = {"run": docker_run_label, **kw.pop("labels", {})}
        return SandboxSpec(image=kw.pop("image", docker_base_image), labels=labels,
                           allow_internet=kw.pop("allow_internet", False),
                           ttl_seconds=kw.pop("ttl_seconds", 600), **kw)
    return make


# --- without an engine ------------------------------------------------------------------

def test_output_that_arrived_with_the_upgrade_headers_is_read():
    """The engine may send a quick command's frames in the same read as its upgrade response:
    http.client then holds them in its buffer, and the raw socket has nothing more to give."""
    import http.client
    import socket
    import struct
    from types import SimpleNamespace

    from sandbatch.sandbox.docker.engine import ExecStream

    ours, engine_side = socket.socketpair()
    frames = struct.pack(">BxxxI", 1, 6) + b"hello\n" + struct.pack(">BxxxI", 2, 4) + b"oops"
    engine_side.sendall(b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
                        b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n" + frames)
    engine_side.close()
    response = http.client.HTTPResponse(ours)
    response.begin()  # as docker-py's exec_start(socket=True) does, through requests and urllib3
    sock = response.fp.raw  # what docker-py hands back: the socket file under the buffer
    sock._response = SimpleNamespace(raw=SimpleNamespace(_fp=response))
    out, err = bytearray(), bytearray()
    ExecStream(None, "x", sock).communicate(None, out, err)
    assert (bytes(out), bytes(err)) == (b"hello\n", b"oops")
    ours.close()


def test_registry_and_schema_defaults():
    cfg = config.parse({"sandbox": {"provider": "docker"}})
    assert provider_class("docker") is DockerProvider
    assert isinstance(get_provider(cfg.sandbox), DockerProvider)
    # the schema holds the defaults; the module's copy must not drift from it
    assert cfg.sandbox.options() == DEFAULTS


def test_resource_quantities():
    assert memory_bytes("256Mi") == 256 * 2**20
    assert memory_bytes("1G") == 10**9
    assert memory_bytes("1.5Gi") == 3 * 2**29
    assert memory_bytes("4096") == 4096
    assert cpu_count("500m") == 0.5
    assert cpu_count("2") == 2.0
    with pytest.raises(UserError, match="resources.memory"):
        memory_bytes("lots")
    with pytest.raises(UserError, match="resources.cpu"):
        cpu_count("two")


def test_bad_options_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="sandbox.docker.pull"):
        DockerProvider({"pull": "sometimes"})
    provider = DockerProvider({"mount_ca_bundle": True, "ca_bundle": str(tmp_path / "missing.crt")})
    with pytest.raises(UserError, match="sandbox.docker.ca_bundle"):
        run(provider.create(SandboxSpec(image="sandbatch/base:bookworm")))


# --- against the engine -----------------------------------------------------------------

def test_lifecycle(spec, docker_engine):
    async def go():
        provider = DockerProvider()
        sb = await provider.create(spec(workdir="/work/repo", env={"SPEC_VAR": "from spec"}))
        assert sb.workdir == "/work/repo" and sb.tmpdir == "/tmp/sandbatch"
        assert await sb.status() == "running"

        res = await sb.exec('pwd; echo "$SPEC_VAR|$EXEC_VAR"; echo err >&2; exit 3',
                            timeout=30, env={"EXEC_VAR": "two words"})
        assert (res.exit_code, res.stdout, res.stderr, res.timed_out) == (3, "/work/repo\nfrom spec|two words\n", "err\n", False)
        res = await sb.exec(["sh", "-c", "pwd; test -d /tmp/sandbatch && cat"], timeout=30, cwd="/tmp", stdin=b"piped\n")
        assert res.ok and res.stdout == "/tmp\npiped\n"

        again = await provider.connect(sb.id, sb.spec)
        assert (await again.exec("echo $SPEC_VAR", timeout=30)).stdout == "from spec\n"

        await sb.delete()
        assert await sb.status() == "gone"
        with pytest.raises(SandboxGone):
            await sb.exec("true", timeout=30)
        with pytest.raises(SandboxGone):
            await sb.upload("/tmp/x", b"x")
        with pytest.raises(SandboxGone):
            await sb.download("/etc/hostname")
        with pytest.raises(SandboxGone):
            await provider.connect(sb.id, sb.spec)
        return sb.id

    name = run(go())
    assert subprocess.run([docker_engine, "container", "inspect", name], capture_output=True).returncode != 0


def test_exec_timeout_kills_the_whole_command(spec):
    async def go():
        sb = await DockerProvider().create(spec())
        start = time.monotonic()
        # a background child and one in a session of its own must die with the command
        # the timeout leaves a loaded engine room to start the exec and print before it
        res = await sb.exec("echo started; echo to-stderr >&2; sleep 1001 & (setsid sleep 1002 &); sleep 1003; echo never",
                            timeout=5)
        assert res.timed_out and res.exit_code == -1 and not res.ok
        # what it printed before the timeout is kept
        assert res.stdout == "started\n" and res.stderr == "to-stderr\n"
        assert time.monotonic() - start < 30
        left = await sb.exec("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '", timeout=30)
        for n in (1001, 1002, 1003):
            assert f"sleep {n}" not in left.stdout
        # the sandbox is still usable afterwards
        assert (await sb.exec("echo ok", timeout=30)).stdout == "ok\n"

    run(go())


def test_stop_processes_leaves_none_of_a_respawning_swarm(spec, docker_engine):
    """Processes that fork faster than a scan of /proc can find them (thousands within a second),
    and chains whose pids hop (each starts its successor in a session of its own and exits): none
    runs after the stop, the image's entrypoint (`sleep TTL` under pid 1) still does, and a stop
    that cannot run is an infrastructure error, never "none left"."""
    hop = "#!/bin/sh\n(setsid /tmp/hop.sh &)\n"
    swarm = ("for i in 1 2 3 4; do (setsid /tmp/hop.sh &); done; "
             "for i in 1 2; do (setsid sh -c 'while :; do (sh -c \"sleep 300\" &); done' &); done")

    async def go():
        sb = await DockerProvider().create(spec())
        await sb.upload("/tmp/hop.sh", hop.encode(), mode=0o755)
        assert (await sb.exec(swarm, timeout=30)).ok
        # a swarm of 100 processes at least, counted by the kernel (forks take well under a
        # millisecond: 30 s is for a loaded host)
        PidsCgroup(docker_engine, sb.id).wait(lambda c: c["current"] >= 100, 30, "a swarm of 100")
        killed = await sb.stop_processes()
        assert killed >= 100
        left = await sb.exec("for d in /proc/[0-9]*; do read -r l < $d/stat && echo \"$l\"; done", timeout=30)
        live = [ln for ln in left.stdout.splitlines() if ln.rsplit(") ", 1)[1].split()[0] not in "ZX"]
        names = sorted(ln.split("(", 1)[1].split(")", 1)[0] for ln in live)
        assert "sleep" in names and "sh" not in names, names  # the entrypoint kept, no daemon left
        with pytest.raises(SandboxError, match="cannot stop the processes"):
            await sb.stop_processes("/no/such/shell")

    run(go())


# A bomb that keeps the pids limit full: each refused fork is retried (a shell's failed fork
# ends that shell, and with it the bomb: the limit would be full only for an instant).
BOMB = ("setsid python3 -c 'import os, time\nwhile True:\n    try:\n        if os.fork() == 0:\n"
        "            time.sleep(300); os._exit(0)\n    except OSError:\n        time.sleep(0.01)\n'"
        " >/dev/null 2>&1 </dev/null &")


def test_a_sandbox_full_at_its_pids_limit_is_still_stopped(spec, docker_engine):
    """A fork bomb that fills the container's pids limit leaves no slot for a fork, yet the stop
    runs: an exec's process is moved into the container's cgroup, which the kernel allows past
    pids.max (only forks are refused), and the stop script forks nothing (shell builtins). That
    the limit is full is read from the kernel's own counters of the container's pids cgroup."""
    limit = 48

    async def go():
        sb = await DockerProvider({"pids_limit": limit}).create(spec())
        try:
            pids = PidsCgroup(docker_engine, sb.id)
            assert pids.max() == limit
            assert (await sb.exec(BOMB, timeout=30)).ok
            # full: every slot taken and forks refused at the limit (pids.events counts them);
            # the bomb needs `limit` forks, each given half a second on a loaded 2-core host
            seen = pids.wait(lambda c: c["current"] >= limit and c["refused"] > 0, limit * 0.5, "the limit full")
            # and still full as the stop starts: the bomb, retrying every 10 ms, is refused again
            assert pids.wait(lambda c: c["refused"] > seen["refused"], 10, "more forks refused")["current"] >= limit
            # an exec still starts (its process joins the full cgroup; a start the runtime fails
            # now and then at a full limit is started again), however often
            for _ in range(10):
                assert (await sb.exec("echo started", timeout=30)).stdout == "started\n", pids.read()
            killed = await sb.stop_processes()
            assert killed == limit - 2, (killed, pids.read())  # all but the init and the entrypoint
            # only the init and the entrypoint are left once the init has reaped the killed (at once;
            # the bound is for a loaded host)
            pids.wait(lambda c: c["current"] <= 2, 30, "the killed processes reaped")
            after = await sb.exec("/bin/sleep 0 && echo forked", timeout=30)
            assert after.stdout.strip() == "forked"  # the slots are free again: no bomb left
        finally:
            await sb.delete()

    run(go())


def test_commands_keep_the_containers_path(spec):
    """A command runs with the PATH the container was given (image ENV or the spec), as on
    OpenSandbox: no login shell resets it from /etc/profile."""
    async def go():
        sb = await DockerProvider().create(spec(env={"PATH": "/opt/tool/bin:/usr/bin:/bin"}))
        try:
            res = await sb.exec("echo $PATH", timeout=30)
            assert res.stdout.strip() == "/opt/tool/bin:/usr/bin:/bin"
        finally:
            await sb.delete()

    run(go())


def test_upload_files_is_one_engine_call(spec):
    """Several files, their modes and new parents, in one archive: one round trip to the engine."""
    files = {"/tmp/sandbatch/a/run.sh": (b"echo run\n", 0o755), "/testbed/b/c/data": (bytes(range(256)), 0o600)}

    async def go():
        sb = await DockerProvider().create(spec())
        try:
            calls, call = [], sb.engine.call

            async def counted(op, *args, **kw):
                calls.append(op)
                return await call(op, *args, **kw)

            sb.engine.call = counted
            await sb.upload_files(files)
            assert calls == ["put_archive"]
            res = await sb.exec("stat -c %a /tmp/sandbatch/a/run.sh /testbed/b/c/data && sh /tmp/sandbatch/a/run.sh",
                                timeout=30)
            assert res.stdout == "755\n600\nrun\n"
            assert await sb.download("/testbed/b/c/data") == bytes(range(256))
        finally:
            await sb.delete()

    run(go())


def test_upload_download_binary_safe(spec):
    data = bytes(range(256)) * 64 + b"\x00\xff\xfe not utf-8 \x80\n"

    async def go():
        sb = await DockerProvider().create(spec())
        await sb.upload("/tmp/sandbatch/deep/new/dir/blob.bin", data, mode=0o750)
        assert await sb.download("/tmp/sandbatch/deep/new/dir/blob.bin") == data
        blob = "/tmp/sandbatch/deep/new/dir/blob.bin"
        res = await sb.exec(["sh", "-c", f"stat -c '%a %s' {blob}; sha256sum < {blob}"], timeout=30)
        assert res.stdout.split()[:3] == ["750", str(len(data)), hashlib.sha256(data).hexdigest()]
        # overwrite; an existing parent keeps its mode
        await sb.upload("/tmp/sandbatch/deep/new/dir/blob.bin", b"short")
        assert await sb.download("/tmp/sandbatch/deep/new/dir/blob.bin") == b"short"
        assert (await sb.exec(["stat", "-c", "%a", "/tmp"], timeout=30)).stdout.strip() == "1777"
        # what a command wrote comes back byte for byte
        await sb.exec(["python3", "-c", "open('/work.bin', 'wb').write(bytes(range(256)))"], timeout=30, cwd="/")
        assert await sb.download("/work.bin") == bytes(range(256))
        with pytest.raises(SandboxError, match="no such file") as err:
            await sb.download("/tmp/sandbatch/nope")
        assert err.value.failure_class == "sandbox_file"
        with pytest.raises(SandboxError, match="directory"):
            await sb.download("/etc")
        with pytest.raises(SandboxError, match="absolute"):
            await sb.upload("relative/path", b"")

    run(go())


def test_list_by_labels_and_expiry(spec, docker_run_label):
    async def go():
        provider = DockerProvider()
        a = await provider.create(spec(labels={"task": "a"}, ttl_seconds=3600))
        b = await provider.create(spec(labels={"task": "b"}))
        both = await provider.list({"run": docker_run_label})
        assert [i.id for i in both] == sorted([a.id, b.id])
        only_a = await provider.list({"run": docker_run_label, "task": "a"})
        assert len(only_a) == 1 and only_a[0].id == a.id and only_a[0].state == "running"
        assert only_a[0].labels == {"run": docker_run_label, "task": "a"}
        # the TTL is recorded as an expiry time that `list` reports
        left = datetime.fromisoformat(only_a[0].expires_at) - datetime.now(timezone.utc)
        assert 3500 < left.total_seconds() <= 3600
        assert await provider.list({"run": docker_run_label, "task": "c"}) == []
        await provider.delete(b.id)
        assert [i.id for i in await provider.list({"run": docker_run_label})] == [a.id]

    run(go())


def test_delete_is_idempotent(spec):
    async def go():
        provider = DockerProvider()
        sb = await provider.create(spec())
        assert await provider.delete(sb.id) is True
        assert await provider.delete(sb.id) is False
        await sb.delete()  # no error either
        assert await provider.delete("sandbatch-never-existed") is False

    run(go())


def test_resources_network_and_labels_applied(spec, docker_engine, docker_run_label):
    async def go():
        sb = await DockerProvider().create(spec(resources={"cpu": "1.5", "memory": "256Mi"}, labels={"task": "t1"}))
        cgroup = await sb.exec("cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null",
                               timeout=30)
        return sb.id, cgroup.stdout

    name, cgroup = run(go())
    data = inspect(docker_engine, name)
    host = data["HostConfig"]
    assert host["NanoCpus"] == 1_500_000_000
    assert host["Memory"] == host["MemorySwap"] == 256 * 2**20
    assert host["PidsLimit"] == 4096  # the default: a fork bomb stays in its sandbox
    assert host["NetworkMode"] == "none"
    assert host["Init"] is True
    assert str(256 * 2**20) in cgroup.split()
    labels = data["Config"]["Labels"]
    assert labels["sandbatch.run"] == docker_run_label and labels["sandbatch.task"] == "t1"
    assert labels["sandbatch.managed"] == "true" and "sandbatch.expires-at" in labels
    # the keep-alive replaced the image's command and ends at the TTL
    assert data["Config"]["Entrypoint"] == ["sleep"] and data["Config"]["Cmd"] == ["600"]


def test_internet_allowed_uses_the_configured_network(spec, docker_engine):
    sb = run(DockerProvider().create(spec(allow_internet=True)))
    assert inspect(docker_engine, sb.id)["HostConfig"]["NetworkMode"] == "bridge"
    # unlike network "none", the sandbox has an interface besides loopback
    assert "eth0" in run(sb.exec("cat /proc/net/dev", timeout=30)).stdout


def test_image_entrypoint_bash_is_overridden(spec, docker_engine, docker_base_image):
    # an image whose ENTRYPOINT is bash exits at once without a terminal unless replaced
    image = f"sandbatch/test-bash-entrypoint:{int(time.time())}"
    tmp = subprocess.run([docker_engine, "create", docker_base_image], capture_output=True, text=True, check=True).stdout.strip()
    try:
        subprocess.run([docker_engine, "commit", "--change", 'ENTRYPOINT ["/bin/bash"]', tmp, image],
                       capture_output=True, check=True)
        sb = run(DockerProvider().create(spec(image=image)))
        assert run(sb.status()) == "running"
        assert run(sb.exec("echo alive", timeout=30)).stdout == "alive\n"
        run(sb.delete())
    finally:
        subprocess.run([docker_engine, "rm", "-f", tmp], capture_output=True)
        subprocess.run([docker_engine, "rmi", "-f", image], capture_output=True)


def test_oom_is_reported(spec):
    async def go():
        provider = DockerProvider()
        # the main process outgrows its limit once told to (a file), after the exec's own OOM
        sb = await provider.create(spec(resources={"memory": "64Mi"}, entrypoint=[
            "sh", "-c", "until [ -e /tmp/oom-now ]; do sleep 0.1; done; "
                        "exec python3 -c 'x = bytearray(512 * 2**20)'"]))
        res = await sb.exec(["python3", "-c", "x = bytearray(512 * 2**20)"], timeout=60)
        assert res.exit_code == 137 and "OOM killer" in res.stderr
        assert (await sb.exec("touch /tmp/oom-now", timeout=30)).ok
        # the engine reports it stopped
        deadline = time.monotonic() + 60
        while await sb.status() == "running" and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        state = await sb.state()
        assert state.state == "stopped" and state.oom_killed, f"60 s after the exec's OOM: {state}"
        with pytest.raises(SandboxOOM, match="OOM-killed") as err:
            await sb.exec("true", timeout=30)
        assert err.value.failure_class == "sandbox_oom"
        with pytest.raises(SandboxGone):
            await provider.connect(sb.id, sb.spec)

    run(go())


def test_ca_bundle_mounted_when_configured(spec, tmp_path):
    bundle = tmp_path / "host-ca.crt"
    bundle.write_text("-----BEGIN CERTIFICATE-----\nsandbatch test bundle\n-----END CERTIFICATE-----\n")

    async def go():
        plain = await DockerProvider().create(spec())
        assert await plain.download("/etc/ssl/certs/ca-certificates.crt") != bundle.read_bytes()
        sb = await DockerProvider({"mount_ca_bundle": True, "ca_bundle": str(bundle)}).create(spec())
        assert await sb.download("/etc/ssl/certs/ca-certificates.crt") == bundle.read_bytes()
        env = await sb.exec("echo $SSL_CERT_FILE $PIP_CERT $REQUESTS_CA_BUNDLE", timeout=30)
        assert env.stdout.split() == ["/etc/ssl/certs/ca-certificates.crt"] * 3
        ro = await sb.exec("echo x >> /etc/ssl/certs/ca-certificates.crt", timeout=30)
        assert ro.exit_code != 0 and "Read-only" in ro.stderr

    run(go())


def test_missing_image_is_an_image_failure(docker_engine, docker_run_label):
    async def go():
        provider = DockerProvider({"pull": "never"})
        with pytest.raises(InfraError) as err:
            await provider.create(SandboxSpec(image="sandbatch/no-such-image:0", labels={"run": docker_run_label}))
        assert err.value.failure_class == "image"
        assert await provider.list({"run": docker_run_label}) == []

    run(go())
