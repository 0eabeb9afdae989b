import asyncio
import re
import time

from sandbatch.core.ids import label_value, path_id
from sandbatch.sandbox.base import SandboxSpec
from sandbatch.sandbox.local import DELETING, LocalProvider
from sandbatch.sandbox.reaper import reap

LABEL = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def test_ids_are_safe_stable_and_distinct():
    assert path_id("django__django-11099") == "django__django-11099"
    weird = ["org/repo#12", "org:repo#12", "ünïcode/ä", "x" * 300, "..hidden", "a b"]
    ids = [path_id(w) for w in weird]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", i) and len(i) <= 120 for i in ids)
    assert path_id("org/repo#12") == path_id("org/repo#12")
    labels = [label_value(w) for w in weird + ["-lead", "trail-", "ok"]]
    assert all(LABEL.match(v) and len(v) <= 63 for v in labels), labels
    assert label_value("ok") == "ok"
    assert label_value("x" * 300) != label_value("x" * 299)


def test_local_provider_lifecycle_timeout_and_listing(tmp_path):
    async def scenario():
        p = LocalProvider({"root": str(tmp_path)})
        a = await p.create(SandboxSpec(labels={"run": "r1", "task": "a"}, env={"FOO": "bar"}))
        b = await p.create(SandboxSpec(labels={"run": "r2", "task": "b"}))
        res = await a.exec("echo $FOO; pwd; echo err >&2; exit 3", timeout=10)
        assert (res.exit_code, res.stdout.split(), res.stderr.strip()) == (3, ["bar", a.workdir], "err")
        t0 = time.monotonic()
        slow = await a.exec("sleep 30 & sleep 30; echo never", timeout=1)
        assert slow.timed_out and slow.exit_code == -1 and "never" not in slow.stdout
        assert time.monotonic() - t0 < 10
        await a.upload(f"{a.tmpdir}/x/y.bin", b"\x00\x01")
        assert await a.download(f"{a.tmpdir}/x/y.bin") == b"\x00\x01"
        await a.upload_files({f"{a.tmpdir}/m/run.sh": (b"echo m", 0o755), f"{a.workdir}/n/d": (b"d", 0o600)})
        res = await a.exec(f"stat -c %a {a.tmpdir}/m/run.sh n/d && sh {a.tmpdir}/m/run.sh", timeout=10)
        assert res.stdout.split() == ["755", "600", "m"]
        assert [i.id for i in await p.list({"run": "r1"})] == [a.id]
        again = await p.connect(a.id, a.spec)
        assert await again.status() == "running"
        assert await p.delete(a.id) is True
        assert await p.delete(a.id) is False  # idempotent
        assert await a.status() == "gone"
        assert [i.id for i in await p.list({})] == [b.id]
        await b.delete()

    asyncio.run(scenario())


def test_a_local_delete_killed_midway_is_finished_by_the_reaper(tmp_path):
    """A delete killed after it began (marker written, the workdir gone, meta.json not yet):
    commands see the sandbox gone, yet the reaper still finds it and removes it whole."""
    async def scenario():
        p = LocalProvider({"root": str(tmp_path)})
        sb = await p.create(SandboxSpec(labels={"run": "r1"}))
        (sb.root / DELETING).touch()
        (sb.root / "work").rmdir()
        assert await sb.status() == "gone"
        assert [i.id for i in await p.list({"run": "r1"})] == [sb.id]
        assert await reap(p, {"run": "r1"}) == [sb.id]
        assert list(tmp_path.iterdir()) == []

    asyncio.run(scenario())


def test_a_local_delete_killed_in_its_last_step_leaves_nothing_after_the_next_listing(tmp_path):
    """Killed between removing meta.json and the directory: an empty directory, which the next
    listing (the reaper's) removes; a directory with anything in it is left alone."""
    async def scenario():
        p = LocalProvider({"root": str(tmp_path)})
        sb = await p.create(SandboxSpec(labels={"run": "r1"}))
        (tmp_path / "sb-000000000000").mkdir()
        (tmp_path / "sb-111111111111").mkdir()
        (tmp_path / "sb-111111111111" / "keep").write_text("x")
        assert [i.id for i in await p.list({"run": "r1"})] == [sb.id]
        assert sorted(d.name for d in tmp_path.iterdir()) == sorted(["sb-111111111111", sb.id])

    asyncio.run(scenario())


def test_local_exec_keeps_the_output_of_a_command_that_timed_out(tmp_path):
    async def scenario():
        sb = await LocalProvider({"root": str(tmp_path)}).create(SandboxSpec(labels={"run": "r"}))
        # printed before the timeout: kept, on both streams (the timeout leaves a loaded machine
        # room to start the shell and print before it)
        res = await sb.exec("echo started; echo warming >&2; head -c 200000 /dev/zero | tr '\\0' x; "
                            "sleep 30; echo never", timeout=3)
        assert res.timed_out and res.exit_code == -1
        assert res.stdout.startswith("started\n") and res.stdout.count("x") == 200000 and "never" not in res.stdout
        assert res.stderr == "warming\n"
        # a process that left the group keeps the pipe open: the exec still ends, with the output
        res = await sb.exec("echo before; setsid sleep 8; echo never", timeout=3)
        assert res.timed_out and res.stdout == "before\n"
        # stdin is fed (and a command that does not read it is fine)
        assert (await sb.exec("cat", timeout=10, stdin=b"in\n")).stdout == "in\n"
        assert (await sb.exec("true", timeout=10, stdin=b"y" * 1_000_000)).ok
        await sb.delete()

    asyncio.run(scenario())
