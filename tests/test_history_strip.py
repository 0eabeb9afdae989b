"""The agent's sandbox holds no repository state from after the base commit (sandbox.history).

A repository built the way leaky task images ship one (tests/fixtures/leaky_repo.sh) is
prepared for the agent on each provider; every way of looking finds only the base's
history, the work tree and the index as they were (tests/leaky_repo.py). With `keep` the
same sandbox still shows the fix, so the check can fail.
"""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from docker_fixtures import docker_base_image, docker_engine, docker_run_label  # noqa: F401 (fixtures)
from leaky_repo import BUILDER, CALC, EXPECTED, assert_no_future, build_image, dirty, expected_of, look
from real_opensandbox import real_opensandbox, reap_run  # noqa: F401 (fixture)
from suite import unique_run
from sandbatch.core.config import load as load_config
from sandbatch.core.errors import UserError
from sandbatch.contracts.records import HistoryRecord
from sandbatch.sandbox.base import SandboxSpec
from sandbatch.sandbox.prepare import prepare
from sandbatch.tasks import Task
from workflow_util import write_config


def _task(base: str, workdir: str = "/testbed") -> Task:
    return Task(id="leaky", instance_id="leaky", base_commit=base, workdir=workdir)


async def _strip_and_check(sandbox, expected, strip: bool = True):
    status, staged = await dirty(sandbox)
    base, repos = await prepare(sandbox, _task(expected.base, sandbox.spec.workdir), timeout=300, strip=strip)
    assert base == expected.base  # the base ref the patch is diffed against and graded on is unchanged
    if strip:
        await assert_no_future(sandbox, expected, status, staged)
    return HistoryRecord.of("strip" if strip else "keep", repos), await look(sandbox)


async def _check_image(provider, image: str, run: str):
    sb = await provider.create(SandboxSpec(image=image, workdir="/testbed", labels={"run": run}, ttl_seconds=600))
    try:
        return await _strip_and_check(sb, await expected_of(sb))
    finally:
        await sb.delete()


def _assert_report(history: HistoryRecord) -> None:
    top, lib = sorted(history.repositories, key=lambda r: r.path)
    assert (top.path, top.refs_before, top.refs_kept) == (".", 11, 1)  # v1.0 stays
    assert {"refs/heads/main", "refs/stash", "refs/notes/commits", "refs/remotes/origin/main",
            "worktree:/future-worktree"} <= set(top.removed_refs)
    assert (lib.path, lib.refs_kept) == ("./lib", 0) and "refs/remotes/origin/master" in lib.removed_refs
    assert history.refs_removed == 13 and history.objects_removed > 0 and history.bytes_removed > 0


def test_local_sandbox_keeps_only_the_base_history(tmp_path):
    from sandbatch.sandbox.local import LocalProvider

    async def scenario(strip: bool):
        provider = LocalProvider({"root": str(tmp_path / f"sandboxes-{strip}")})
        sb = await provider.create(SandboxSpec())
        try:
            out, worktree = f"{sb.tmpdir}/leaky", f"{sb.tmpdir}/future-worktree"
            built = await sb.exec(f"bash {BUILDER} {sb.workdir} {CALC} {out} {worktree}", timeout=120)
            assert built.ok, built.stderr
            return await _strip_and_check(sb, await expected_of(sb, out, worktree), strip)
        finally:
            await sb.delete()

    history, _ = asyncio.run(scenario(True))
    top, lib = sorted(history.repositories, key=lambda r: r.path)
    assert (top.refs_before, top.refs_kept, lib.refs_kept) == (11, 1, 0)
    assert "refs/heads/main" in top.removed_refs and any(r.startswith("worktree:") for r in top.removed_refs)
    assert history.refs_removed == 13 and history.objects_removed > 0
    # without stripping, the same looks find the fix: the check above can fail
    kept, seen = asyncio.run(scenario(False))
    assert kept.setting == "keep" and kept.repositories == []
    assert "v2.0" in seen["."]["tags"] and len(seen["."]["log"]) > len(seen["."]["history"])


def test_docker_sandbox_keeps_only_the_base_history(tmp_path, docker_engine, docker_base_image, docker_run_label):
    from sandbatch.sandbox.docker import DockerProvider

    image = build_image(docker_engine, docker_base_image, tmp_path)

    history, _ = asyncio.run(_check_image(DockerProvider(), image, docker_run_label))
    _assert_report(history)


def test_docker_strips_once_per_image(tmp_path, docker_engine, docker_base_image, docker_run_label):
    """Docker keeps the stripped checkout as an image of its own: made on first use, then
    reused; its sandboxes hold nothing of the future, and the image runs as its source did."""
    import json

    from sandbatch.sandbox.docker import PREPARED, DockerProvider
    from sandbatch.sandbox.prepare import checkout_script, read_output

    image = build_image(docker_engine, docker_base_image, tmp_path)
    spec = SandboxSpec(image=image, workdir="/testbed", labels={"run": docker_run_label}, ttl_seconds=600)

    async def scenario():
        provider = DockerProvider()
        probe = await provider.create(spec)
        try:
            expected = await expected_of(probe)
        finally:
            await probe.delete()
        script = checkout_script(_task(expected.base), "/testbed", strip=True)
        # a fresh tag per test run: the build is what is tested
        script += f" # {docker_run_label}"
        made = [await provider.image_after(spec, script, timeout=300) for _ in range(2)]
        sb = await provider.create(spec.model_copy(update={"image": made[0][0]}))
        try:
            base, _ = await prepare(sb, _task(expected.base), timeout=300, strip=False)
            await assert_no_future(sb, expected, status_before="", staged="")
        finally:
            await sb.delete()
        return made, base, expected

    try:
        made, base, expected = asyncio.run(scenario())
        (tag, output), again = made
        assert again == (tag, output) and tag.startswith(PREPARED + ":")
        assert base == expected.base and read_output(output, strip=True)[0] == expected.base
        _assert_report(HistoryRecord.of("strip", read_output(output, strip=True)[1]))
        source, derived = (json.loads(subprocess.run([docker_engine, "image", "inspect", i], capture_output=True,
                                                     text=True, check=True).stdout)[0]["Config"]
                           for i in (image, tag))
        for key in ("Entrypoint", "Cmd", "WorkingDir", "Env"):
            assert (derived.get(key) or None) == (source.get(key) or None) or key == "WorkingDir", key
        assert derived["WorkingDir"] in (source["WorkingDir"], "/")
    finally:
        subprocess.run([docker_engine, "image", "rm", "-f", tag], capture_output=True)


def test_opensandbox_sandbox_keeps_only_the_base_history(tmp_path, real_opensandbox, docker_engine,
                                                         docker_base_image):
    from real_opensandbox import with_provider

    image = build_image(docker_engine, docker_base_image, tmp_path)
    run = unique_run("hist")

    try:
        history, _ = with_provider(real_opensandbox.options(), lambda p: _check_image(p, image, run))
    finally:
        assert reap_run(real_opensandbox, run) == []
    _assert_report(history)


def test_history_setting_is_validated(tmp_path):
    assert load_config([]).sandbox.history == "strip"  # on unless a user says otherwise
    assert load_config([write_config(tmp_path, "keep.yaml", {"sandbox": {"history": "keep"}})]).sandbox.history == "keep"
    bad = write_config(tmp_path, "bad.yaml", {"sandbox": {"history": "prune"}})
    with pytest.raises(UserError) as err:
        load_config([bad])
    message = str(err.value)
    assert "bad.yaml" in message and "sandbox.history" in message and "strip" in message and "keep" in message
    assert "\n" not in message.strip()


def test_the_image_is_what_the_check_expects(docker_engine, docker_base_image, tmp_path):
    """The leaky image really leaks: its repository lists the future before preparation."""
    image = build_image(docker_engine, docker_base_image, tmp_path)
    out = subprocess.run([docker_engine, "run", "--rm", image, "sh", "-c",
                          f"cd /testbed && git log --all --format=%H && echo @@ && cat {EXPECTED}/future"],
                         capture_output=True, text=True, check=True).stdout
    listed, future = (part.split() for part in out.split("@@"))
    assert len(set(listed) & set(future)) >= 3  # the fix, the later commit, the stash at least


def test_the_steps_strip_the_agent_sandbox_and_its_replacement_not_the_grader(tmp_path, monkeypatch, docker_engine,
                                                                             docker_base_image):
    """The sandbox step strips the agent's sandbox and records it; a harness step that finds
    that sandbox used makes a replacement, stripped the same way; the grading sandbox keeps
    the image's repository (the agent never sees it)."""
    from sandbatch import REPO_ROOT
    from sandbatch.core import config
    from sandbatch.contracts.records import SANDBOX, SandboxRecord, load
    from sandbatch.steps.common import StepContext, run_step
    from sandbatch.steps.harness import HarnessStep
    from sandbatch.steps.recovery import STARTED_MARK
    from sandbatch.steps.sandbox import SandboxStep, build_spec, create_prepared
    from leaky_repo import task_rows

    monkeypatch.chdir(tmp_path)
    image = build_image(docker_engine, docker_base_image, tmp_path)
    base = subprocess.run([docker_engine, "run", "--rm", image, "cat", f"{EXPECTED}/base"],
                          capture_output=True, text=True, check=True).stdout.strip()
    run = unique_run("hist-steps")
    cfg = config.load([], {"run": run, "results_dir": str(tmp_path / "results"), "retries": 0,
                           "benchmark": {"kind": "smoke", "tasks": str(task_rows(tmp_path, image, base))},
                           "sandbox": {"provider": "docker"}}, default=REPO_ROOT / "config" / "default.yaml")
    (tmp_path / "run.json").write_text(cfg.model_dump_json(), encoding="utf-8")
    ctx = StepContext(tmp_path / "run.json", "leaky__honest", 0, 1, 1)

    async def scenario():
        await run_step(SandboxStep(ctx))
        handle = load(SandboxRecord, ctx.path(SANDBOX))
        first = await ctx.provider.connect(handle.sandbox_id, handle.spec)
        await first.upload(f"{first.tmpdir}/{STARTED_MARK}", b"")  # an interrupted attempt used it
        step = HarnessStep(ctx)
        replacement = await step._sandbox(handle)
        grading, _ = await create_prepared(ctx, build_spec(ctx, "grade"))
        try:
            return handle, step.replacement, await look(replacement), await look(grading), \
                await ctx.provider.list({"run": run})
        finally:
            for sb in (replacement, grading):
                await sb.delete()
            await ctx.aclose()

    handle, again, agent_sees, grader_sees, alive = asyncio.run(scenario())
    for record in (handle, again):
        assert record.base_ref == base and record.history.setting == "strip"
        assert record.history.refs_removed == 13 and record.history.objects_removed > 0
    assert "prepare_image" in handle.phases  # docker: stripped once, in an image of its own
    assert again.recreated == 1 and again.sandbox_id != handle.sandbox_id
    assert handle.sandbox_id not in [i.id for i in alive]  # the used one was deleted
    assert agent_sees["."]["tags"] == ["v1.0"] and len(agent_sees["."]["log"]) == 2
    assert "v2.0" in grader_sees["."]["tags"] and len(grader_sees["."]["log"]) > 2


def test_a_preparation_that_printed_no_commit_is_an_infrastructure_error():
    """Exit 0 with no commit printed (the exec's output lost): a retried infrastructure error of
    the sandbox step, not a crash."""
    from sandbatch.sandbox.base import SandboxError
    from sandbatch.sandbox.prepare import STRIP_MARK, read_output

    for stdout in ("", "\n", f"{STRIP_MARK} {{}}\n"):
        with pytest.raises(SandboxError) as err:
            read_output(stdout, strip=True)
        assert err.value.failure_class == "sandbox_prepare" and "printed no commit" in str(err.value)
