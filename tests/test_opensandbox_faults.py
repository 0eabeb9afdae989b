"""Faults on the real protocol: the opensandbox provider talks to the REAL OpenSandbox server
through a fault-injecting proxy (tests/opensandbox_proxy.py).

Every test ends with no sandbox of its run left on the server and no command but the
(idempotent) probe forwarded to execd twice. Whether a command ran is read from inside the
sandbox: each test command appends its marker to a file.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest


from opensandbox_proxy import FaultProxy  # noqa: E402
from real_opensandbox import IMAGE, os_run, real_opensandbox, with_provider  # noqa: E402,F401 (fixtures)

from sandbatch.core.errors import InfraError  # noqa: E402
from sandbatch.sandbox import SandboxSpec  # noqa: E402
from sandbatch.sandbox.base import SandboxError, SandboxGone  # noqa: E402
from sandbatch.sandbox.reaper import reap  # noqa: E402

PROBE_PREFIX = "mkdir -p /tmp/sandbatch "  # how the provider starts its probe
RERUN_PREFIX = ": idempotent; "  # a command a test reruns on purpose (exec's lost="rerun")
MARKS = "/tmp/sandbatch/marks"


@pytest.fixture(scope="module")
def fault_proxy(real_opensandbox):
    proxy = FaultProxy(real_opensandbox.url)
    yield proxy
    proxy.stop()


@pytest.fixture
def proxy(fault_proxy, os_run):
    fault_proxy.reset()
    yield fault_proxy
    twice = fault_proxy.sent_twice((PROBE_PREFIX, RERUN_PREFIX))
    fault_proxy.reset()
    assert not twice, f"commands sent to execd more than once: {twice}"


def run(proxy, real, body, **overrides):
    """`body(provider)` with the provider pointed at the proxy; short waits."""
    defaults = {"create": {"backoff_initial": 0.05, "backoff_max": 0.2},
                "operations": {"backoff_initial": 0.02, "backoff_max": 0.1}}
    for section, values in overrides.items():
        defaults[section] = {**defaults.get(section, {}), **values}
    return with_provider(real.options(proxy.domain, **defaults), body)


def spec(run: str, **labels) -> SandboxSpec:
    return SandboxSpec(image=IMAGE, labels={"run": run, **labels}, ttl_seconds=600)


def marked(mark: str) -> str:
    return f"echo {mark} >> {MARKS}; echo {mark}"


async def runs(sb, mark: str) -> int:
    """How many times a `marked(mark)` command ran in `sb`."""
    res = await sb.exec(f"grep -c {mark} {MARKS} || true", timeout=30, cwd="/")
    return int(res.stdout.strip() or 0)


def marker() -> str:
    return "m" + uuid.uuid4().hex[:12]


# --- create ------------------------------------------------------------------------------------

def test_create_retries_5xx_and_honours_retry_after(proxy, real_opensandbox, os_run):
    proxy.add_fault(op="create", action="status", status=503, count=2)
    proxy.add_fault(op="create", action="status", status=500, count=1)
    proxy.add_fault(op="create", action="status", status=429, retry_after=1, count=1)

    async def body(p):
        start = time.monotonic()
        sb = await p.create(spec(os_run))
        elapsed = time.monotonic() - start
        listed = [i.id for i in await p.list({"run": os_run})]
        await sb.delete()
        return sb.id, listed, elapsed

    sandbox_id, listed, elapsed = run(proxy, real_opensandbox, body)
    assert listed == [sandbox_id] and elapsed >= 1.0  # the jittered backoff alone is < 0.6 s here
    stats = proxy.stats()
    assert stats["faults_fired"] == {"create:status": 4} and stats["requests"]["create"] == 5


@pytest.mark.parametrize("status, attempts", [(503, 3), (400, 1)])  # retried up to the budget; not retried
def test_create_that_keeps_failing_raises_sandbox_error(proxy, real_opensandbox, os_run, status, attempts):
    proxy.add_fault(op="create", action="status", status=status, count=50)

    async def body(p):
        with pytest.raises(SandboxError) as err:
            await p.create(spec(os_run))
        return err.value

    err = run(proxy, real_opensandbox, body, create={"retries": 2})
    assert isinstance(err, InfraError) and err.failure_class == "sandbox_create"
    assert proxy.stats()["requests"]["create"] == attempts


def test_slow_create_leaves_no_sandbox_behind(proxy, real_opensandbox, os_run):
    """The POST times out while the real server makes the sandbox: the stray is found and deleted."""
    proxy.add_fault(op="create", action="delay", seconds=8, count=1)

    async def body(p):
        with pytest.raises(SandboxError):
            await p.create(spec(os_run))
        await asyncio.to_thread(proxy.wait_answered, 8 + 60)  # the abandoned POST, the server's create
        return [i.id for i in await p.list({"run": os_run})]

    assert run(proxy, real_opensandbox, body, connection={"request_timeout": 1}, create={"retries": 0}) == []
    assert proxy.stats()["requests"]["delete"] >= 1


def test_slow_create_retried_keeps_exactly_one(proxy, real_opensandbox, os_run):
    proxy.add_fault(op="create", action="delay", seconds=6, count=1)

    async def body(p):
        sb = await p.create(spec(os_run))
        await asyncio.to_thread(proxy.wait_answered, 6 + 60)  # the abandoned create, the server's create
        listed = [i.id for i in await p.list({"run": os_run})]
        await sb.delete()
        return sb.id, listed

    sandbox_id, listed = run(proxy, real_opensandbox, body, connection={"request_timeout": 2}, create={"retries": 2})
    assert listed == [sandbox_id]


def test_late_stray_is_reaped_by_labels(proxy, real_opensandbox, os_run):
    """A sandbox that appears only after the client gave up is found by the reaper, once."""
    proxy.add_fault(op="create", action="delay", seconds=2, forward_late=True, count=1)
    labels = {"run": os_run, "task": "x"}

    async def body(p):
        with pytest.raises(SandboxError):
            await p.create(spec(**labels))
        deadline = time.monotonic() + 30
        while not await p.list(labels):  # the leak
            assert time.monotonic() < deadline, "the late create never made its sandbox"
            await asyncio.sleep(0.5)
        return await reap(p, labels), await reap(p, labels)

    first, second = run(proxy, real_opensandbox, body, connection={"request_timeout": 1}, create={"retries": 0})
    assert len(first) == 1 and second == []


def test_create_request_dropped_unanswered_is_retried(proxy, real_opensandbox, os_run):
    """No answer to the POST: the client cannot know, so it looks for a stray, then retries."""
    proxy.add_fault(op="create", action="drop", count=1)

    async def body(p):
        sb = await p.create(spec(os_run))
        listed = [i.id for i in await p.list({"run": os_run})]
        await sb.delete()
        return sb.id, listed

    sandbox_id, listed = run(proxy, real_opensandbox, body)
    assert listed == [sandbox_id]
    stats = proxy.stats()
    assert stats["faults_fired"] == {"create:drop": 1} and stats["requests"]["create"] == 2
    assert stats["requests"]["list"] >= 2  # the stray search, then the test's own


def test_create_waits_for_the_endpoints(proxy, real_opensandbox, os_run):
    # what a Kubernetes runtime answers before the pod has an address
    proxy.add_fault(op="endpoint", action="status", status=404, code="KUBERNETES::POD_IP_NOT_AVAILABLE", count=2)

    async def body(p):
        sb = await p.create(spec(os_run))
        await sb.delete()

    run(proxy, real_opensandbox, body)
    stats = proxy.stats()
    assert stats["faults_fired"] == {"endpoint:status": 2}
    assert stats["requests"]["endpoint"] == 4  # two unpublished, then execd's and the egress sidecar's


def test_endpoint_failure_deletes_the_created_sandbox(proxy, real_opensandbox, os_run):
    proxy.add_fault(op="endpoint", action="status", status=503, count=50)

    async def body(p):
        with pytest.raises(SandboxError, match="cannot create a sandbox") as err:
            await p.create(spec(os_run))
        return err.value, await p.list({"run": os_run})

    err, left = run(proxy, real_opensandbox, body, create={"retries": 1, "ready_timeout": 2},
                    operations={"retries": 0})
    assert err.failure_class == "sandbox_create" and left == []
    stats = proxy.stats()
    assert stats["requests"]["create"] == 2 and stats["requests"]["delete"] == 2


def test_probe_waits_for_execd(proxy, real_opensandbox, os_run):
    """Probe attempts that meet a 502 are retried until the deadline."""
    proxy.add_fault(op="exec", action="status", status=502, count=4)

    async def body(p):
        sb = await p.create(spec(os_run))
        await sb.delete()

    run(proxy, real_opensandbox, body, operations={"exec_retries": 0}, probe={"interval": 0.05})
    assert proxy.stats()["faults_fired"]["exec:status"] == 4


# --- commands -----------------------------------------------------------------------------------

def test_exec_faults(proxy, real_opensandbox, os_run):
    """In one sandbox: 502s while execd binds are retried and the command runs once; past the
    budget it never ran; a stream cut after the start is reported, not resent; a request
    closed unanswered is reported, not resent; a server that never answers meets the
    client-side deadline (the command ran, and is not sent again)."""
    ok, never, cut, dropped, late = (marker() for _ in range(5))

    async def body(p):
        sb = await p.create(spec(os_run))
        try:
            proxy.add_fault(op="exec", action="status", status=502, count=2)
            res = await sb.exec(marked(ok), timeout=30)
            assert res.ok and res.stdout == f"{ok}\n"

            proxy.add_fault(op="exec", action="status", status=502, count=50)
            with pytest.raises(SandboxError) as err:
                await sb.exec(marked(never), timeout=30)
            assert not isinstance(err.value, SandboxGone) and err.value.failure_class == "sandbox_exec"
            assert "did not accept" in str(err.value)
            proxy.clear_faults()

            proxy.add_fault(op="exec", action="cut", count=1)
            with pytest.raises(SandboxError) as err:
                await sb.exec(marked(cut), timeout=30)
            assert "may have run" in str(err.value)

            proxy.add_fault(op="exec", action="drop", count=1)
            with pytest.raises(SandboxError):
                await sb.exec(marked(dropped), timeout=30)

            proxy.add_fault(op="exec", action="delay", seconds=6, count=1)
            start = time.monotonic()
            res = await sb.exec(marked(late), timeout=0.5)
            assert res.timed_out and time.monotonic() - start < 5
            await asyncio.to_thread(proxy.wait_answered, 6 + 30)  # execd's answer to the late command
            return [await runs(sb, m) for m in (ok, never, cut, dropped, late)]
        finally:
            await sb.delete()

    counts = run(proxy, real_opensandbox, body, operations={"exec_retries": 2, "exec_grace": 1})
    assert counts == [1, 0, 1, 0, 1], proxy.stats()  # the late one ran, unanswered, and was not sent again
    fired = proxy.stats()["faults_fired"]
    assert fired["exec:status"] == 2 + 3 and fired["exec:cut"] == 1 and fired["exec:drop"] == 1


def test_a_stream_ended_without_an_exit_status_is_a_timeout_only_once_the_command_had_its_time(
        proxy, real_opensandbox, os_run):
    """execd can end a command's stream without its exit status when it stops the command at its
    timeout on a loaded host: that command had all its time, a timeout; a stream that ends so
    before the command's time is up is an infrastructure error, as before."""
    async def body(p):
        sb = await p.create(spec(os_run))
        try:
            proxy.add_fault(op="exec", action="unfinished", count=1)
            start = time.monotonic()
            stopped = await sb.exec("sleep 30", timeout=2)
            took = time.monotonic() - start
            proxy.add_fault(op="exec", action="unfinished", count=1)
            with pytest.raises(SandboxError) as err:
                await sb.exec("true", timeout=30)
            return stopped, took, err.value
        finally:
            await sb.delete()

    stopped, took, err = run(proxy, real_opensandbox, body, operations={"exec_grace": 20})
    assert (stopped.timed_out, stopped.exit_code) == (True, -1) and took < 20, (stopped, took)
    assert err.failure_class == "sandbox_exec" and "did not complete" in str(err), err
    # execd itself is asked what became of it: the command finished, only its stream lost the end
    assert "execd reports it finished with exit 0" in str(err), err
    assert proxy.stats()["faults_fired"]["exec:unfinished"] == 2


def test_a_command_whose_stream_ends_early_runs_on_and_its_caller_says_what_then(proxy, real_opensandbox, os_run):
    """execd's own proxy ends a command's stream cleanly, end and exit status lost, when its inner
    hop fails on a loaded host (docs/providers.md); the command runs on. lost="fail" (the default)
    is an infrastructure error saying what execd reports of it; "rerun" (an idempotent command)
    waits until execd reports it finished and runs it again, whole; "wait" (a command whose result
    is in files) returns the exit status execd reports, marked as having lost its output."""
    async def body(p):
        sb = await p.create(spec(os_run))
        try:
            proxy.add_fault(op="exec", action="ended", count=1)
            with pytest.raises(SandboxError) as err:
                await sb.exec("sleep 5; echo done >> /tmp/sandbatch/ran", timeout=30)  # asked at once: running
            proxy.add_fault(op="exec", action="ended", count=1)
            rerun = await sb.exec(RERUN_PREFIX + "sleep 1; echo run >> /tmp/sandbatch/reran; cat /tmp/sandbatch/reran",
                                  timeout=30, lost="rerun")
            proxy.add_fault(op="exec", action="ended", count=1)
            start = time.monotonic()
            waited = await sb.exec("sleep 2; echo partial; exit 7", timeout=30, lost="wait")
            took = time.monotonic() - start
            ran = await sb.exec("for _ in $(seq 60); do [ -s /tmp/sandbatch/ran ] && break; sleep 0.5; done; "
                                "cat /tmp/sandbatch/ran", timeout=60)
            return err.value, rerun, waited, took, ran
        finally:
            await sb.delete()

    err, rerun, waited, took, ran = run(proxy, real_opensandbox, body, operations={"exec_retries": 2})
    assert err.failure_class == "sandbox_exec" and "execd reports it still running" in str(err), err
    # the second run began after the first had finished: both appended before the second read
    assert rerun.ok and rerun.stdout.split() == ["run", "run"] and not rerun.output_lost, rerun
    assert (waited.exit_code, waited.output_lost) == (7, True) and "partial" not in waited.stdout, waited
    assert took >= 2, took  # it waited for the command's end
    assert ran.stdout.split() == ["done"], ran  # the one that failed ran on to its end
    stats = proxy.stats()
    assert stats["faults_fired"]["exec:ended"] == 3
    assert [n for per in stats["commands"].values() for text, n in per.items() if text.startswith(RERUN_PREFIX)] == [2]


# --- idempotent operations --------------------------------------------------------------------

def test_idempotent_calls_are_retried(proxy, real_opensandbox, os_run):
    async def body(p):
        sb = await p.create(spec(os_run))
        try:
            assert await sb.status() == "running"  # leaves a kept-alive connection in the pool
            proxy.add_fault(op="get", action="drop_on_reuse", count=1)
            assert await sb.status() == "running"
            proxy.add_fault(op="list", action="drop_on_reuse", count=1)
            assert [i.id for i in await p.list(sb.spec.labels)] == [sb.id]
            proxy.add_fault(op="download", action="status", status=503, count=2)
            await sb.upload("/tmp/sandbatch/x", b"x")
            assert await sb.download("/tmp/sandbatch/x") == b"x"
            proxy.add_fault(op="upload", action="status", status=502, count=2)
            await sb.upload("/tmp/sandbatch/y", b"y")
            assert await sb.download("/tmp/sandbatch/y") == b"y"
            proxy.add_fault(op="list", action="status", status=503, count=50)
            with pytest.raises(SandboxError):
                await p.list(sb.spec.labels)
            proxy.clear_faults()
            proxy.add_fault(op="delete", action="gone", count=1)
            assert await p.delete(sb.id) is False  # 404: already gone
        finally:
            proxy.clear_faults()
            await p.delete(sb.id)

    run(proxy, real_opensandbox, body, operations={"retries": 2})
    stats = proxy.stats()
    assert stats["faults_fired"] == {"get:drop_on_reuse": 1, "list:drop_on_reuse": 1, "download:status": 2,
                                     "upload:status": 2, "list:status": 3, "delete:gone": 1}
