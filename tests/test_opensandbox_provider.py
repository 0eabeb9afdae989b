"""The opensandbox provider, with the REAL `opensandbox` SDK over HTTP against the local stand-in.

Every test ends with the stand-in holding no sandbox, no command having started twice
(probe commands excepted: they are idempotent and retried by design) and no telemetry
sent. Faults are injected into the stand-in (tests/opensandbox_server).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest

pytest.importorskip("opensandbox")
pytest.importorskip("aiohttp")

from opensandbox_server import StandIn  # noqa: E402

from sandbatch.config import validate  # noqa: E402
from sandbatch.errors import InfraError, UserError  # noqa: E402
from sandbatch.ids import label_value  # noqa: E402
from sandbatch.sandbox import SandboxSpec, provider_class  # noqa: E402
from sandbatch.sandbox.base import SandboxError, SandboxGone  # noqa: E402
from sandbatch.sandbox.reaper import reap  # noqa: E402

PROBE_PREFIX = "mkdir -p /tmp/sandbatch && "  # how the provider starts its probe


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    server = StandIn.in_thread(tmp_path_factory.mktemp("opensandbox"))
    yield server
    server.stop()


@pytest.fixture
def server(standin):
    standin.reset(sandboxes=True)
    yield standin
    stats = standin.stats()
    standin.reset(sandboxes=True)
    assert stats["live"] == 0, f"sandboxes left behind: {stats['ids']}"
    twice = {text: n for text, n in stats["commands"].items() if n > 1 and not text.startswith(PROBE_PREFIX)}
    assert not twice, f"commands that ran more than once: {twice}"
    assert stats["metrics_events"] == 0, "SDK telemetry was sent"


def options(server, **overrides):
    """Provider options for tests: the schema's defaults with short waits."""
    opts = {
        "connection": {"domain": server.domain, "api_key_env": None, "request_timeout": 5},
        "create": {"backoff_initial": 0.05, "backoff_max": 0.2, "ready_timeout": 5},
        "probe": {"interval": 0.05, "timeout": 10},
        "operations": {"backoff_initial": 0.02, "backoff_max": 0.1, "timeout": 20, "exec_grace": 5},
    }
    for section, values in overrides.items():
        opts.setdefault(section, {}).update(values)
    return opts


def spec(**labels) -> SandboxSpec:
    labels = labels or {"run": "t-" + uuid.uuid4().hex[:8]}
    return SandboxSpec(image="python:3.11", labels=labels, ttl_seconds=600)


def run(coro_fn, server, **overrides):
    """Run `coro_fn(provider)` with a fresh provider on a fresh event loop."""
    async def main():
        async with provider_class("opensandbox")(options(server, **overrides)) as provider:
            return await coro_fn(provider)

    return asyncio.run(main())


def marker() -> str:
    return "m" + uuid.uuid4().hex[:12]


# --- the happy path ------------------------------------------------------------------------

def test_create_exec_files_list_delete(server):
    labels = {"run": "roundtrip", "task": "t1", "repeat": "0"}
    mark = marker()

    async def body(p):
        sb = await p.create(spec(**labels))
        assert (sb.workdir, sb.tmpdir) == ("/testbed", "/tmp/sandbatch")
        res = await sb.exec(f"echo {mark}; echo; printf 'no newline'; echo oops >&2; exit 3", timeout=10)
        assert (res.exit_code, res.stdout, res.stderr, res.timed_out) == (3, f"{mark}\n\nno newline\n", "oops\n", False)
        res = await sb.exec(["python3", "-c", f"import sys; print(sys.stdin.read().upper(), '{mark}')"],
                            timeout=10, stdin=b"piped")
        assert res.ok and res.stdout == f"PIPED {mark}\n"
        payload = bytes(range(256)) * 40
        await sb.upload("/testbed/sub/blob.bin", payload, mode=0o600)
        assert await sb.download("/testbed/sub/blob.bin") == payload
        assert server.host_path(sb.id, "/testbed/sub/blob.bin").stat().st_mode & 0o777 == 0o600
        res = await sb.exec(f"ls sub && echo {mark}-cwd", timeout=10)  # cwd defaults to the workdir
        assert res.stdout == f"blob.bin\n{mark}-cwd\n"
        with pytest.raises(SandboxError) as missing:
            await sb.download("/testbed/nope")
        assert not isinstance(missing.value, SandboxGone)
        listed = await p.list(labels)
        assert [i.id for i in listed] == [sb.id] and listed[0].state == "running"
        assert listed[0].labels["task"] == "t1" and listed[0].expires_at
        again = await p.connect(sb.id, sb.spec)
        assert (await again.exec(f"echo {mark}-again", timeout=10)).stdout == f"{mark}-again\n"
        assert await sb.status() == "running"
        await sb.delete()
        assert await sb.status() == "gone"
        assert await p.delete(sb.id) is False  # idempotent: 404 = already gone
        assert await p.list(labels) == []
        with pytest.raises(SandboxGone):
            await p.connect(sb.id, sb.spec)

    run(body, server)
    assert server.runs_of(mark) == 4  # each command exactly once


def test_exec_timeouts_server_side_and_client_side(server):
    mark = marker()

    async def body(p):
        sb = await p.create(spec())
        try:
            start = time.monotonic()
            res = await sb.exec(f"sleep 30 # {mark}", timeout=1)
            assert res.timed_out and res.exit_code == -1 and time.monotonic() - start < 10
            # a server that never answers: the client-side deadline still ends the call
            server.add_fault(op="exec", action="delay", seconds=5, count=1)
            start = time.monotonic()
            res = await sb.exec(f"echo {mark}-late", timeout=0.5)
            assert res.timed_out and time.monotonic() - start < 4
        finally:
            await sb.delete()

    run(body, server, operations={"exec_grace": 1})
    assert server.runs_of(mark) == 1
    assert server.runs_of(f"{mark}-late") == 0


# --- create faults -----------------------------------------------------------------------------

def test_create_retries_5xx(server):
    server.add_fault(op="create", action="status", status=503, count=2)
    server.add_fault(op="create", action="status", status=500, count=1)

    async def body(p):
        sb = await p.create(spec())
        await sb.delete()

    run(body, server)
    stats = server.stats()
    assert stats["faults_fired"] == {"create:status": 3}
    assert stats["created_total"] == 1 and stats["requests"]["create"] == 4


def test_create_honours_retry_after_on_429(server):
    server.add_fault(op="create", action="status", status=429, retry_after=1, count=1)

    async def body(p):
        start = time.monotonic()
        sb = await p.create(spec())
        elapsed = time.monotonic() - start
        await sb.delete()
        return elapsed

    assert run(body, server) >= 1.0  # the jittered backoff alone would be < 0.2 s here
    assert server.stats()["created_total"] == 1


def test_create_beyond_retry_budget_raises_sandbox_error(server):
    server.add_fault(op="create", action="status", status=503, count=50)

    async def body(p):
        with pytest.raises(SandboxError) as err:
            await p.create(spec())
        return err.value

    err = run(body, server, create={"retries": 2})
    assert isinstance(err, InfraError) and err.failure_class == "sandbox_create"
    assert server.stats()["requests"]["create"] == 3


def test_create_client_error_is_not_retried(server):
    server.add_fault(op="create", action="status", status=400, count=5)

    async def body(p):
        with pytest.raises(SandboxError):
            await p.create(spec())

    run(body, server)
    assert server.stats()["requests"]["create"] == 1


def test_slow_create_leaves_no_sandbox_behind(server):
    """The POST times out while the server is still creating: the stray is found and deleted."""
    server.add_fault(op="create", action="delay", seconds=2.5, visible=True, count=1)
    labels = {"run": "slow-" + uuid.uuid4().hex[:6]}

    async def body(p):
        with pytest.raises(SandboxError):
            await p.create(spec(**labels))

    run(body, server, connection={"request_timeout": 1}, create={"retries": 0})
    assert server.stats()["live"] == 0  # deleted while the server was still creating it
    time.sleep(2)  # the server finishes its slow create: the deleted sandbox must stay deleted
    assert server.stats()["live"] == 0


def test_slow_create_retried_keeps_exactly_one(server):
    server.add_fault(op="create", action="delay", seconds=2, visible=True, count=1)
    labels = {"run": "slow-" + uuid.uuid4().hex[:6]}

    async def body(p):
        sb = await p.create(spec(**labels))
        await asyncio.sleep(1.5)  # the first, abandoned create would have finished by now
        listed = [i.id for i in await p.list(labels)]
        await sb.delete()
        return sb.id, listed

    sandbox_id, listed = run(body, server, connection={"request_timeout": 1}, create={"retries": 2})
    assert listed == [sandbox_id]


def test_late_stray_is_reaped_by_labels(server):
    """A sandbox that appears only after the client gave up is found by the reaper, once."""
    server.add_fault(op="create", action="delay", seconds=1.5, visible=False, count=1)
    labels = {"run": "late-" + uuid.uuid4().hex[:6], "task": "x"}

    async def body(p):
        with pytest.raises(SandboxError):
            await p.create(spec(**labels))
        await asyncio.sleep(1.5)
        assert len(await p.list(labels)) == 1  # the leak
        first = await reap(p, labels)
        second = await reap(p, labels)
        return first, second

    first, second = run(body, server, connection={"request_timeout": 0.5}, create={"retries": 0})
    assert len(first) == 1 and second == []


def test_create_request_dropped_unanswered_is_retried(server):
    """No answer to the POST: the client cannot know, so it looks for a stray, then retries."""
    server.add_fault(op="create", action="drop", count=1)
    labels = {"run": "drop-" + uuid.uuid4().hex[:6]}

    async def body(p):
        sb = await p.create(spec(**labels))
        listed = [i.id for i in await p.list(labels)]
        await sb.delete()
        return sb.id, listed

    sandbox_id, listed = run(body, server)
    assert listed == [sandbox_id]
    stats = server.stats()
    assert stats["faults_fired"] == {"create:drop": 1} and stats["created_total"] == 1
    assert stats["requests"]["list"] >= 2  # the stray search, then the test's own


def test_list_pages_renew_and_metadata_patch(server, monkeypatch):
    from sandbatch.sandbox import opensandbox as osb

    monkeypatch.setattr(osb, "PAGE_SIZE", 2)
    labels = {"run": "pages-" + uuid.uuid4().hex[:6]}

    async def body(p):
        sandboxes = await asyncio.gather(*(p.create(spec(**labels, task=f"t{i}")) for i in range(5)))
        listed = sorted(i.id for i in await p.list(labels))
        first = sandboxes[0]
        manager = await p.manager()  # the SDK's own lifecycle client
        renewed = await manager.renew_sandbox(first.id, timedelta(hours=5))
        await manager.patch_sandbox_metadata(first.id, {"task": None, "extra": "yes"})
        patched = await p.list({**labels, "extra": "yes"})
        deleted = await reap(p, labels)
        return sorted(sb.id for sb in sandboxes), listed, renewed, patched, deleted, first.id

    ids, listed, renewed, patched, deleted, first_id = run(body, server)
    assert listed == ids and sorted(deleted) == ids
    assert renewed.expires_at > datetime.now(timezone.utc) + timedelta(hours=4)
    assert [i.id for i in patched] == [first_id]
    assert "task" not in patched[0].labels and patched[0].labels["extra"] == "yes"
    assert server.stats()["requests"]["list"] >= 3 + 1  # three pages, then the filtered list


# --- exec faults ---------------------------------------------------------------------------------

def test_exec_502_while_execd_binds_is_retried_and_runs_once(server):
    mark = marker()

    async def body(p):
        sb = await p.create(spec())
        try:
            server.add_fault(op="exec", action="status", status=502, count=3)
            res = await sb.exec(f"echo {mark}", timeout=10)
            assert res.ok and res.stdout == f"{mark}\n"
        finally:
            await sb.delete()

    run(body, server)
    assert server.runs_of(mark) == 1
    assert server.stats()["faults_fired"]["exec:status"] == 3


def test_exec_502_beyond_budget_raises_and_never_ran(server):
    mark = marker()

    async def body(p):
        sb = await p.create(spec())
        try:
            server.add_fault(op="exec", action="status", status=502, count=50)
            with pytest.raises(SandboxError) as err:
                await sb.exec(f"echo {mark}", timeout=10)
            assert not isinstance(err.value, SandboxGone) and err.value.failure_class == "sandbox_exec"
        finally:
            server.clear_faults()
            await sb.delete()

    run(body, server, operations={"exec_retries": 2})
    assert server.runs_of(mark) == 0
    assert server.stats()["faults_fired"]["exec:status"] == 3


def test_exec_broken_after_start_is_not_retried(server):
    mark = marker()

    async def body(p):
        sb = await p.create(spec())
        try:
            server.add_fault(op="exec", action="cut", count=1)
            with pytest.raises(SandboxError) as err:
                await sb.exec(f"echo {mark}", timeout=10)
            assert "may have run" in str(err.value)
        finally:
            await sb.delete()

    run(body, server)
    assert server.runs_of(mark) == 1  # it started once and was not sent again


def test_exec_dropped_connection_is_not_retried(server):
    """An unanswered command request is ambiguous for the client: reported, never resent."""
    mark = marker()

    async def body(p):
        sb = await p.create(spec())
        try:
            server.add_fault(op="exec", action="drop", count=1)
            with pytest.raises(SandboxError):
                await sb.exec(f"echo {mark}", timeout=10)
        finally:
            await sb.delete()

    run(body, server)
    assert server.runs_of(mark) == 0
    assert server.stats()["faults_fired"] == {"exec:drop": 1}


# --- idempotent operations --------------------------------------------------------------------

def test_connection_dropped_on_reuse_is_retried_for_idempotent_calls(server):
    async def body(p):
        sb = await p.create(spec())
        try:
            assert await sb.status() == "running"  # leaves a kept-alive connection in the pool
            server.add_fault(op="get", action="drop_on_reuse", count=1)
            assert await sb.status() == "running"
            server.add_fault(op="list", action="drop_on_reuse", count=1)
            assert [i.id for i in await p.list(sb.spec.labels)] == [sb.id]
            server.add_fault(op="download", action="status", status=503, count=2)
            await sb.upload("/tmp/sandbatch/x", b"x")
            assert await sb.download("/tmp/sandbatch/x") == b"x"
            server.add_fault(op="upload", action="status", status=502, count=2)
            await sb.upload("/tmp/sandbatch/y", b"y")
            assert await sb.download("/tmp/sandbatch/y") == b"y"
        finally:
            await sb.delete()

    run(body, server)
    fired = server.stats()["faults_fired"]
    assert fired == {"get:drop_on_reuse": 1, "list:drop_on_reuse": 1, "download:status": 2, "upload:status": 2}


def test_idempotent_call_beyond_budget_raises_sandbox_error(server):
    async def body(p):
        sb = await p.create(spec())
        try:
            server.add_fault(op="list", action="status", status=503, count=50)
            with pytest.raises(SandboxError):
                await p.list(sb.spec.labels)
        finally:
            server.clear_faults()
            await sb.delete()

    run(body, server, operations={"retries": 2})
    assert server.stats()["requests"]["list"] == 3


def test_delete_404_means_already_gone(server):
    async def body(p):
        sb = await p.create(spec())
        server.add_fault(op="delete", action="gone", count=1)
        return await p.delete(sb.id)

    assert run(body, server) is False
    assert server.stats()["live"] == 0


# --- dead sandboxes -----------------------------------------------------------------------------

def test_oom_killed_sandbox_raises_sandbox_gone(server):
    mark = marker()

    async def body(p):
        sb = await p.create(spec())
        try:
            server.fail_sandbox(sb.id, reason="OOMKilled")
            with pytest.raises(SandboxGone, match="OOMKilled"):
                await sb.exec(f"echo {mark}", timeout=10)
            assert await sb.status() == "gone"
            with pytest.raises(SandboxGone):
                await p.connect(sb.id, sb.spec)
        finally:
            await p.delete(sb.id)

    run(body, server)
    assert server.runs_of(mark) == 0


def test_oom_kill_during_a_command_raises_sandbox_gone(server):
    mark = marker()

    async def body(p):
        sb = await p.create(spec())
        try:
            task = asyncio.ensure_future(sb.exec(f"sleep 20 # {mark}", timeout=30))
            await asyncio.sleep(0.5)
            await asyncio.to_thread(server.fail_sandbox, sb.id)
            with pytest.raises(SandboxGone):
                await task
        finally:
            await p.delete(sb.id)

    run(body, server)
    assert server.runs_of(mark) == 1


def test_expired_sandbox_raises_sandbox_gone(server):
    async def body(p):
        sb = await p.create(spec())
        server.expire_sandbox(sb.id)
        with pytest.raises(SandboxGone):
            await sb.exec("true", timeout=10)
        with pytest.raises(SandboxGone):
            await sb.upload("/tmp/sandbatch/z", b"z")
        with pytest.raises(SandboxGone):
            await sb.download("/tmp/sandbatch/z")

    run(body, server, operations={"exec_retries": 1, "retries": 1})


def test_probe_failure_deletes_the_sandbox(server):
    async def body(p):
        with pytest.raises(SandboxError) as err:
            await p.create(spec())
        return err.value

    err = run(body, server, probe={"command": "echo something-else", "expected": "never", "timeout": 0.5})
    assert err.failure_class == "sandbox_probe"
    assert server.stats()["created_total"] == 1  # created, probed, deleted (the fixture checks live == 0)


def test_probe_waits_for_execd(server):
    """Probe attempts that meet a 502 are retried until the deadline."""
    server.add_fault(op="exec", action="status", status=502, count=4)

    async def body(p):
        sb = await p.create(spec())
        await sb.delete()

    run(body, server, operations={"exec_retries": 0})
    assert server.stats()["faults_fired"]["exec:status"] == 4


def test_create_waits_for_the_endpoint_and_looks_up_execd_only(server):
    server.add_fault(op="endpoint", action="status", status=404, code="KUBERNETES::POD_IP_NOT_AVAILABLE", count=2)

    async def body(p):
        sb = await p.create(spec())
        await sb.delete()

    run(body, server)
    stats = server.stats()
    assert stats["faults_fired"] == {"endpoint:status": 2} and stats["created_total"] == 1
    assert stats["requests"]["endpoint"] == 3  # two unpublished, then execd's (no egress sidecar lookup)


def test_endpoint_failure_deletes_the_created_sandbox(server):
    server.add_fault(op="endpoint", action="status", status=503, count=50)

    async def body(p):
        with pytest.raises(SandboxError, match="cannot create a sandbox") as err:
            await p.create(spec())
        return err.value

    err = run(body, server, create={"retries": 1})
    assert err.failure_class == "sandbox_create"
    stats = server.stats()
    assert stats["created_total"] == 2 and stats["deleted_total"] == 2 and stats["live"] == 0


# --- labels and auth ---------------------------------------------------------------------------

def test_long_and_slashed_task_ids_are_sanitised_and_found(server):
    task = "django/django__django-" + "9" * 80 + "/with spaces"
    labels = {"run": "labels", "task": label_value(task), "repeat": "0"}
    raw = {"run": "labels", "task": task, "repeat": "1"}  # not sanitised by the caller

    async def body(p):
        a = await p.create(spec(**labels))
        b = await p.create(spec(**raw))
        found_a = [i.id for i in await p.list(labels)]
        found_b = [i.id for i in await p.list(raw)]
        both = sorted(i.id for i in await p.list({"run": "labels", "task": task}))
        deleted = await reap(p, {"run": "labels", "task": task})
        return a.id, b.id, found_a, found_b, both, deleted

    a, b, found_a, found_b, both, deleted = run(body, server)
    assert len(label_value(task)) <= 63
    assert found_a == [a] and found_b == [b]
    assert both == sorted([a, b]) and sorted(deleted) == sorted([a, b])


def test_reserved_label_prefix_is_a_user_error(server):
    async def body(p):
        with pytest.raises(UserError, match="opensandbox.io/"):
            await p.create(spec(**{"opensandbox.io/owner": "me"}))

    run(body, server)
    assert server.stats()["requests"].get("create", 0) == 0


def test_api_key_from_environment(server, monkeypatch):
    server.configure(api_key="s3cret")
    monkeypatch.setenv("SANDBATCH_TEST_OSB_KEY", "s3cret")

    async def ok(p):
        sb = await p.create(spec())
        await sb.delete()

    run(ok, server, connection={"api_key_env": "SANDBATCH_TEST_OSB_KEY"})
    monkeypatch.setenv("SANDBATCH_TEST_OSB_KEY", "wrong")

    async def refused(p):
        with pytest.raises(SandboxError) as err:
            await p.create(spec())
        return err.value

    err = run(refused, server, connection={"api_key_env": "SANDBATCH_TEST_OSB_KEY"})
    assert err.failure_class == "sandbox_auth" and "SANDBATCH_TEST_OSB_KEY" in str(err)
    assert "s3cret" not in str(err) and "wrong" not in str(err)


# --- config -------------------------------------------------------------------------------------

def test_config_block_has_defaults_and_rejects_unknown_keys():
    cfg = validate({"sandbox": {"provider": "opensandbox", "opensandbox": {"connection": {"domain": "h:1"}}}})
    block = cfg["sandbox"]["opensandbox"]
    assert block["connection"]["domain"] == "h:1" and block["connection"]["keep_alive_expiry"] < 5
    assert block["probe"]["expected"] == "sandbatch-ready" and block["create"]["retries"] >= 1
    with pytest.raises(UserError, match="unknown key 'nope'"):
        validate({"sandbox": {"opensandbox": {"operations": {"nope": 1}}}})


def test_reap_refuses_empty_labels(tmp_path):
    with pytest.raises(UserError):
        asyncio.run(reap(provider_class("local")({"root": str(tmp_path)}), {}))


def test_only_the_provider_module_imports_the_sdk():
    import subprocess
    import sys

    code = ("import sys, sandbatch.sandbox, sandbatch.sandbox.admission, sandbatch.sandbox.reaper, sandbatch.config; "
            "print('opensandbox' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_standin_runs_as_a_subprocess_too(tmp_path):
    async def body(p):
        sb = await p.create(spec())
        try:
            res = await sb.exec("echo out; echo err >&2; exit 3", timeout=10)
            assert (res.exit_code, res.stdout, res.stderr) == (3, "out\n", "err\n")
            res = await sb.exec("sleep 30", timeout=0.5)  # killed by the stand-in, then reaped
            assert res.timed_out and res.exit_code == -1
        finally:
            await sb.delete()

    with StandIn.in_subprocess(tmp_path) as server:
        assert server.stats()["live"] == 0
        server.configure(latency={"lifecycle": 0.01})
        cpu0 = server.stats()["commands_cpu_s"]
        run(body, server)
        stats = server.stats()
        assert stats["live"] == 0 and stats["commands_cpu_s"] > cpu0


def test_standin_command_cancelled_while_starting_leaves_no_process():
    import os

    import psutil
    from opensandbox_server.app import PIDFDS, _Process

    if not PIDFDS:
        pytest.skip("no pidfds here: the stand-in starts commands with asyncio")
    marker_arg = "31.25"  # a sleep nobody else runs

    def ours() -> list[psutil.Process]:
        found = []
        for child in psutil.Process().children():
            try:
                if child.cmdline() == ["sleep", marker_arg] or child.status() == psutil.STATUS_ZOMBIE:
                    found.append(child)
            except psutil.NoSuchProcess:
                pass
        return found

    before = {p.pid for p in ours()}

    async def main():
        start = asyncio.ensure_future(_Process.start(["sleep", marker_arg], "/", {"PATH": os.environ["PATH"]}))
        await asyncio.sleep(0)  # the process is being started on a worker thread
        start.cancel()
        with pytest.raises(asyncio.CancelledError):
            await start
        await asyncio.sleep(1)  # the start has long finished: its process is killed and reaped
        return [p.pid for p in ours() if p.pid not in before]

    assert asyncio.run(main()) == []
