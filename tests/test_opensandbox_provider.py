"""The opensandbox provider, with the REAL `opensandbox` SDK against the REAL OpenSandbox
server (tests/real_opensandbox.py; faults through a proxy are in test_opensandbox_faults.py).

Every sandbox a test makes carries the test's own run label (`os_run`); at the end none may
be left. Images are the local `sandbatch/base:bookworm`, which has no /testbed.
"""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest


from docker_fixtures import docker_engine  # noqa: E402,F401 (fixture)
from real_opensandbox import IMAGE, os_run, real_opensandbox, with_provider  # noqa: E402,F401 (fixtures)

from sandbatch.core.config import validate  # noqa: E402
from sandbatch.core.errors import UserError  # noqa: E402
from sandbatch.core.ids import label_value  # noqa: E402
from sandbatch.sandbox import SandboxSpec  # noqa: E402
from sandbatch.sandbox.base import SandboxError, SandboxGone  # noqa: E402
from sandbatch.sandbox.opensandbox import CREATE_LABEL  # noqa: E402
from sandbatch.sandbox.reaper import reap  # noqa: E402


def spec(run: str, **labels) -> SandboxSpec:
    return SandboxSpec(image=IMAGE, labels={"run": run, **labels}, ttl_seconds=600)


def marker() -> str:
    return "m" + uuid.uuid4().hex[:12]


# --- the real server ------------------------------------------------------------------------

def test_create_exec_files_list_delete(real_opensandbox, os_run):
    labels = {"run": os_run, "task": "t1", "repeat": "0"}
    mark = marker()

    async def body(p):
        sb = await p.create(spec(**labels))
        assert (sb.workdir, sb.tmpdir) == ("/testbed", "/tmp/sandbatch")
        res = await sb.exec(f"echo {mark}; echo; printf 'no newline'; echo oops >&2; exit 3", timeout=30)
        assert (res.exit_code, res.stdout, res.stderr, res.timed_out) == (3, f"{mark}\n\nno newline\n", "oops\n", False)
        res = await sb.exec(["python3", "-c", f"import sys; print(sys.stdin.read().upper(), '{mark}')"],
                            timeout=30, stdin=b"piped")
        assert res.ok and res.stdout == f"PIPED {mark}\n"

        # binary files both ways, with their mode
        payload = bytes(range(256)) * 40
        await sb.upload("/testbed/sub/blob.bin", payload, mode=0o600)
        assert await sb.download("/testbed/sub/blob.bin") == payload
        res = await sb.exec("stat -c %a sub/blob.bin && ls sub", timeout=30)  # cwd defaults to the workdir
        assert res.stdout == "600\nblob.bin\n"
        # several files in one write, each with its mode, parents made
        await sb.upload_files({"/testbed/many/a.sh": (b"echo a\n", 0o755), "/tmp/sandbatch/x/y/b": (payload, 0o640)})
        res = await sb.exec("stat -c %a many/a.sh /tmp/sandbatch/x/y/b && sh many/a.sh", timeout=30)
        assert res.stdout == "755\n640\na\n"
        assert await sb.download("/tmp/sandbatch/x/y/b") == payload
        res = await sb.exec("head -c 100000 /dev/urandom > made.bin && sha256sum made.bin", timeout=30)
        made = await sb.download("/testbed/made.bin")
        assert len(made) == 100000 and res.stdout.split()[0] == hashlib.sha256(made).hexdigest()
        with pytest.raises(SandboxError) as missing:
            await sb.download("/testbed/nope")
        assert not isinstance(missing.value, SandboxGone)

        # large and non-UTF-8 output; CR splits lines (execd sends lines)
        res = await sb.exec("printf '\\377\\376 ok\\n'; head -c 3000000 /dev/zero | tr '\\0' a; echo; printf 'a\\rb'",
                            timeout=60)
        lines = res.stdout.split("\n")
        assert res.ok and lines[0] == "\ufffd\ufffd ok" and lines[1] == "a" * 3_000_000
        assert lines[2:] == ["a", "b", ""]

        # a command that outlives its timeout is stopped, and so is what it would do next
        start = time.monotonic()
        res = await sb.exec("date +%s.%N > /tmp/sandbatch/began; sleep 4 && touch /tmp/sandbatch/late", timeout=1)
        assert res.timed_out and res.exit_code == -1 and time.monotonic() - start < 15

        # labels and metadata as the server stores them
        listed = await p.list(labels)
        assert [i.id for i in listed] == [sb.id] and listed[0].state == "running"
        # the server reports the container's labels: ours, the create nonce, the image's own
        assert labels.items() <= listed[0].labels.items()
        assert len(listed[0].labels[CREATE_LABEL]) == 32
        expires = datetime.fromisoformat(listed[0].expires_at)
        assert timedelta(minutes=8) < expires - datetime.now(timezone.utc) <= timedelta(minutes=10)

        again = await p.connect(sb.id, sb.spec)
        assert (await again.exec(f"echo {mark}-again", timeout=30)).stdout == f"{mark}-again\n"
        # past the moment the stopped command would have touched it: 4 s after it began (the
        # sandbox's clock is the host's), however late a loaded machine started it
        began = await sb.exec("cat /tmp/sandbatch/began", timeout=30)
        would = float(began.stdout) + 4 if began.ok else time.time()  # never began: nothing to wait for
        await asyncio.sleep(max(0.0, would + 1 - time.time()))
        assert (await sb.exec("test -e /tmp/sandbatch/late", timeout=30)).exit_code == 1
        assert await sb.status() == "running"
        await sb.delete()
        assert await sb.status() == "gone"
        assert await p.delete(sb.id) is False  # idempotent: 404 = already gone
        assert await p.list(labels) == []
        with pytest.raises(SandboxGone):
            await p.connect(sb.id, sb.spec)
        with pytest.raises(SandboxGone):
            await sb.exec("true", timeout=30)

    with_provider(real_opensandbox.options(), body)


def test_workdir_is_made_and_a_refused_command_did_not_run(real_opensandbox, os_run):
    """The image has no /testbed: create makes it; a cwd execd refuses (HTTP 400) is definitive."""
    mark = marker()

    async def body(p):
        sb = await p.create(spec(os_run))
        try:
            res = await sb.exec("pwd", timeout=30)
            assert res.ok and res.stdout == "/testbed\n"
            with pytest.raises(SandboxError) as err:
                await sb.exec(f"touch /tmp/{mark}", timeout=30, cwd="/nonexistent")
            assert not isinstance(err.value, SandboxGone)
            assert "did not run" in str(err.value) and "may have run" not in str(err.value)
            assert "HTTP 400" in str(err.value) and "/nonexistent" in str(err.value)
            assert (await sb.exec(f"test -e /tmp/{mark}", timeout=30, cwd="/")).exit_code == 1
        finally:
            await sb.delete()

    with_provider(real_opensandbox.options(), body)


def test_ttl_expiry_by_the_server(real_opensandbox, os_run):
    """The server deletes a sandbox at its expiry; every later call says it is gone."""
    async def body(p):
        sb = await p.create(spec(os_run))
        manager = await p.manager()  # the SDK's own lifecycle client
        await manager.renew_sandbox(sb.id, timedelta(seconds=2))
        deadline = time.monotonic() + 60
        while await p.info(sb.id) is not None:
            assert time.monotonic() < deadline, "the server did not expire the sandbox"
            await asyncio.sleep(0.5)
        with pytest.raises(SandboxGone, match="deleted or expired"):
            await sb.exec("true", timeout=30)
        with pytest.raises(SandboxGone):
            await sb.upload("/tmp/sandbatch/z", b"z")
        with pytest.raises(SandboxGone):
            await sb.download("/tmp/sandbatch/z")
        assert await p.list({"run": os_run}) == []

    with_provider(real_opensandbox.options(operations={"exec_retries": 1, "retries": 1}), body)


def test_killed_container_raises_sandbox_gone(real_opensandbox, os_run, docker_engine):
    """The sandbox's container dies under a running command (as an OOM kill would end it)."""
    async def body(p):
        sb = await p.create(spec(os_run))
        try:
            task = asyncio.ensure_future(sb.exec("touch /tmp/running; sleep 60", timeout=90))
            # killed while the command runs (polled in the container, not guessed by a sleep)
            deadline = time.monotonic() + 60
            while subprocess.run([docker_engine, "exec", f"sandbox-{sb.id}", "test", "-e", "/tmp/running"],
                                 capture_output=True, timeout=60).returncode != 0:
                assert time.monotonic() < deadline and not task.done(), "the command never started"
                await asyncio.sleep(0.1)
            await asyncio.to_thread(subprocess.run, [docker_engine, "kill", f"sandbox-{sb.id}"],
                                    check=True, capture_output=True, timeout=60)
            with pytest.raises(SandboxGone):
                await asyncio.wait_for(task, 60)
            assert await sb.status() == "gone"
            with pytest.raises(SandboxGone):
                await p.connect(sb.id, sb.spec)
        finally:
            await p.delete(sb.id)

    with_provider(real_opensandbox.options(), body)


def test_reaper_labels_pages_and_metadata(real_opensandbox, os_run, monkeypatch):
    """Sanitised task ids find their sandboxes; the reaper deletes exactly what carries its
    labels, across pages; renew and metadata patches through the SDK's own client."""
    from sandbatch.sandbox import opensandbox as osb

    monkeypatch.setattr(osb, "PAGE_SIZE", 1)
    task = "django/django__django-" + "9" * 80 + "/with spaces"
    specs = [spec(os_run, task=task, role="agent"),  # not sanitised by the caller
             spec(os_run, task=label_value("other/task"), role="agent"),
             spec(os_run, task=label_value("other/task"), role="grader")]

    async def body(p):
        ids = [sb.id for sb in await asyncio.gather(*(p.create(sp) for sp in specs))]
        assert [i.id for i in await p.list({"run": os_run, "task": task})] == [ids[0]]
        assert [i.id for i in await p.list({"run": os_run, "task": label_value(task)})] == [ids[0]]
        assert sorted(i.id for i in await p.list({"run": os_run})) == sorted(ids)  # three pages
        manager = await p.manager()
        renewed = await manager.renew_sandbox(ids[2], timedelta(hours=5))
        assert renewed.expires_at > datetime.now(timezone.utc) + timedelta(hours=4)
        await manager.patch_sandbox_metadata(ids[2], {"role": None, "extra": "yes"})
        patched = await p.list({"run": os_run, "extra": "yes"})
        assert [i.id for i in patched] == [ids[2]] and "role" not in patched[0].labels
        first = await reap(p, {"run": os_run, "role": "agent"})
        second = await reap(p, {"run": os_run, "role": "agent"})
        left = [i.id for i in await p.list({"run": os_run})]
        await p.delete(ids[2])
        return ids, first, second, left

    ids, first, second, left = with_provider(real_opensandbox.options(), body)
    assert len(label_value(task)) <= 63
    assert sorted(first) == sorted(ids[:2]) and second == [] and left == [ids[2]]


def test_probe_failure_deletes_the_sandbox(real_opensandbox, os_run):
    async def body(p):
        with pytest.raises(SandboxError) as err:
            await p.create(spec(os_run))
        return err.value

    err = with_provider(real_opensandbox.options(probe={"command": "echo something-else", "expected": "never",
                                                        "timeout": 2}), body)
    assert err.failure_class == "sandbox_probe"  # and os_run finds nothing left


async def median_true(sb) -> float:
    """The median seconds of five `true` commands in `sb`."""
    took = []
    for _ in range(5):
        t0 = time.monotonic()
        assert (await sb.exec("true", timeout=30)).ok
        took.append(time.monotonic() - t0)
    return sorted(took)[2]


def test_execd_grace_set_in_the_sandbox_and_commands_do_not_wait_a_second(real_opensandbox, os_run):
    # execd keeps a finished command's stream open EXECD_API_GRACE_SHUTDOWN (its default 1 s);
    # every sandbox gets create.execd_grace (50ms), a task's own value wins, null leaves execd's
    async def body(p):
        out = []
        for env in ({}, {"EXECD_API_GRACE_SHUTDOWN": "20ms"}):
            sb = await p.create(SandboxSpec(image=IMAGE, labels={"run": os_run}, ttl_seconds=600, env=env))
            try:
                res = await sb.exec("echo $EXECD_API_GRACE_SHUTDOWN; exit 3", timeout=30)
                out.append((res.exit_code, res.stdout, await median_true(sb)))
            finally:
                await p.delete(sb.id)
        return out

    (code, grace, median), (_, own, _) = with_provider(real_opensandbox.options(), body)
    assert (code, grace, own) == (3, "50ms\n", "20ms\n")

    async def default(p):
        sb = await p.create(spec(os_run))
        try:
            return (await sb.exec("echo ${EXECD_API_GRACE_SHUTDOWN:-unset}", timeout=30)).stdout, await median_true(sb)
        finally:
            await p.delete(sb.id)

    unset, slow = with_provider(real_opensandbox.options(create={"execd_grace": None}), default)
    assert unset == "unset\n"
    # execd's default tail alone is 1 s a command; measured against it in one run, not a fixed bound
    assert slow - median > 0.5, (slow, median)


def test_probe_retries_soon_then_backs_off(real_opensandbox, os_run):
    # the probe fails twice, then passes: its retries come after 0.1 s and 0.2 s (doubling up
    # to probe.interval), not after a whole interval each
    stamps = f"/tmp/probe-{uuid.uuid4().hex}"
    command = f"date +%s.%N >> {stamps}; [ $(wc -l < {stamps}) -ge 3 ] && echo sandbatch-ready"

    async def body(p):
        sb = await p.create(spec(os_run))
        try:
            return (await sb.exec(f"cat {stamps}", timeout=30)).stdout
        finally:
            await p.delete(sb.id)

    text = with_provider(real_opensandbox.options(probe={"command": command, "interval": 30.0}), body)
    times = [float(x) for x in text.split()]
    assert len(times) == 3
    gaps = [b - a for a, b in zip(times, times[1:])]
    # at least the backoff, and far from the 30 s interval (the bound leaves a loaded machine room
    # for the probe's own round trip: it only tells the two apart)
    assert 0.1 <= gaps[0] < 10 and 0.2 <= gaps[1] < 10, gaps


def test_wrong_api_key_is_an_auth_error_naming_the_variable(real_opensandbox, os_run, monkeypatch):
    monkeypatch.setenv("SANDBATCH_TEST_OSB_KEY", "wrong-key")

    async def refused(p):
        with pytest.raises(SandboxError) as err:
            await p.create(spec(os_run))
        return err.value

    err = with_provider(real_opensandbox.options(connection={"api_key_env": "SANDBATCH_TEST_OSB_KEY"}), refused)
    assert err.failure_class == "sandbox_auth" and "SANDBATCH_TEST_OSB_KEY" in str(err)
    assert "wrong-key" not in str(err) and real_opensandbox.key not in str(err)


def test_reserved_label_prefix_is_a_user_error(real_opensandbox, os_run):
    async def body(p):
        with pytest.raises(UserError, match="opensandbox.io/"):
            await p.create(spec(os_run, **{"opensandbox.io/owner": "me"}))

    with_provider(real_opensandbox.options(), body)


# --- units ----------------------------------------------------------------------------------

# --- config -------------------------------------------------------------------------------------

def test_config_block_has_defaults_and_rejects_unknown_keys():
    cfg = validate({"sandbox": {"provider": "opensandbox", "opensandbox": {"connection": {"domain": "h:1"}}}})
    block = cfg["sandbox"]["opensandbox"]
    assert block["connection"]["domain"] == "h:1" and block["connection"]["keep_alive_expiry"] < 5
    assert block["probe"]["expected"] == "sandbatch-ready" and block["create"]["retries"] >= 1
    with pytest.raises(UserError, match="unknown key 'nope'"):
        validate({"sandbox": {"opensandbox": {"operations": {"nope": 1}}}})


def test_a_partial_resources_block_keeps_the_other_defaults():
    from sandbatch.sandbox import provider_class

    given = {"create": {"resources": {"cpu": "4", "nvidia.com/gpu": "1"}}}
    cfg = validate({"sandbox": {"provider": "opensandbox", "opensandbox": given}})  # the config's loader
    assert cfg["sandbox"]["opensandbox"]["create"]["resources"] == {"cpu": "4", "memory": "4Gi", "nvidia.com/gpu": "1"}
    provider = provider_class("opensandbox")({"connection": {"domain": "h:1"}, **given})  # options not loaded
    assert provider.options["create"]["resources"] == {"cpu": "4", "memory": "4Gi", "nvidia.com/gpu": "1"}
    assert provider.options["create"]["retries"] == 4 and provider.options["connection"]["domain"] == "h:1"


def test_reap_refuses_empty_labels(tmp_path):
    from sandbatch.sandbox import provider_class

    with pytest.raises(UserError):
        asyncio.run(reap(provider_class("local")({"root": str(tmp_path)}), {}))


def test_only_the_provider_module_imports_the_sdk():
    import subprocess
    import sys

    code = ("import sys, sandbatch.sandbox, sandbatch.sandbox.admission, sandbatch.sandbox.reaper, sandbatch.core.config; "
            "print('opensandbox' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"



# --- the stand-in, for what the real server cannot be made to do ------------------------------

def test_server_reported_failure_with_reason_raises_sandbox_gone(tmp_path):
    """A sandbox the server reports Failed (OOMKilled), with its reason in the error: a
    whole-sandbox OOM kill cannot be produced on the real server here."""
    from opensandbox_server import StandIn

    async def body(p):
        sb = await p.create(SandboxSpec(image=IMAGE, labels={"run": "oom"}, ttl_seconds=600))
        try:
            server.fail_sandbox(sb.id, reason="OOMKilled")
            with pytest.raises(SandboxGone, match="OOMKilled"):
                await sb.exec("true", timeout=10)
            assert await sb.status() == "gone"
        finally:
            await p.delete(sb.id)

    with StandIn.in_thread(tmp_path) as server:
        with_provider({"connection": {"domain": server.domain, "api_key_env": None},
                       "probe": {"interval": 0.05, "timeout": 10}}, body)
        assert server.stats()["live"] == 0


def test_standin_runs_as_a_subprocess_too(tmp_path):
    from opensandbox_server import StandIn

    async def body(p):
        sb = await p.create(SandboxSpec(image=IMAGE, labels={"run": "sub"}, ttl_seconds=600))
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
        with_provider({"connection": {"domain": server.domain, "api_key_env": None},
                       "probe": {"interval": 0.05, "timeout": 10}}, body)
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
        # the start finishes on its thread, then its process is killed and reaped: wait for that
        # (well before the sleep would end by itself at 31 s), say what is left on giving up
        deadline = time.monotonic() + 10
        while (left := [p.pid for p in ours() if p.pid not in before]) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return left

    assert asyncio.run(main()) == []


