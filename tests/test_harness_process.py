"""What the agent harnesses share: running with a timeout, stdout as events, uploads."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from sandbatch.core.errors import InfraError
from sandbatch.harness._process import TEXT_EVENT, json_events, run_command, sh, upload_source
from sandbatch.sandbox.base import SandboxSpec
from sandbatch.sandbox.local import LocalProvider


def in_sandbox(tmp_path, fn):
    async def go():
        sandbox = await LocalProvider({"root": str(tmp_path / "sb")}).create(SandboxSpec())
        try:
            return await fn(sandbox)
        finally:
            await sandbox.delete()
    return asyncio.run(go())


def test_json_events_keeps_every_line():
    out = '{"type": "a"}\n\nnot json\n[1, 2]\n{"type": "b", "x": {"y": 1}}\n{"trunc'
    assert json_events(out) == [{"type": "a"}, {"type": TEXT_EVENT, "text": "not json"},
                                {"type": TEXT_EVENT, "text": "[1, 2]"}, {"type": "b", "x": {"y": 1}},
                                {"type": TEXT_EVENT, "text": '{"trunc'}]


def test_run_command_in_workdir_with_env_and_stdin(tmp_path):
    async def fn(sandbox):
        return sandbox, await run_command(sandbox, ["bash", "-c", 'pwd; echo "$GREETING"; cat; echo oops >&2; exit 3'],
                                          timeout=30, env={"GREETING": "hi there"}, stdin=b"from stdin\n")

    sandbox, run = in_sandbox(tmp_path, fn)
    assert run.stdout.splitlines() == [sandbox.workdir, "hi there", "from stdin"]
    assert (run.exit_code, run.timed_out, run.stderr) == (3, False, "oops\n")


def test_timeout_kills_the_agent_and_keeps_what_it_printed(tmp_path):
    async def fn(sandbox):
        script = 'echo \'{"type": "started"}\'; sleep 0.2; echo partial; sleep 300 & wait'
        # the timeout leaves a loaded machine room to start bash and print both lines first
        return await run_command(sandbox, ["bash", "-c", script], timeout=4)

    run = in_sandbox(tmp_path, fn)
    assert run.timed_out and run.exit_code is None
    assert 3.9 < run.duration_s < 30
    assert json_events(run.stdout) == [{"type": "started"}, {"type": TEXT_EVENT, "text": "partial"}]


def test_upload_source_file_and_directory_with_symlinks(tmp_path):
    tool = tmp_path / "prefix"
    (tool / "lib" / "pkg").mkdir(parents=True)
    (tool / "lib" / "pkg" / "tool.sh").write_text("#!/bin/sh\necho tool ran\n")
    (tool / "lib" / "pkg" / "tool.sh").chmod(0o755)
    (tool / "bin").mkdir()
    os.symlink("../lib/pkg/tool.sh", tool / "bin" / "tool")
    single = tmp_path / "single"
    single.write_text("#!/bin/sh\necho single ran\n")

    async def fn(sandbox):
        d = await upload_source(sandbox, str(tool), f"{sandbox.tmpdir}/t", timeout=30)
        f = await upload_source(sandbox, str(single), f"{sandbox.tmpdir}/s/single", timeout=30)
        return (await sh(sandbox, f"{d}/bin/tool && {f}", timeout=30, what="run"),
                Path(d, "bin", "tool").is_symlink())

    out, linked = in_sandbox(tmp_path, fn)
    assert out == "tool ran\nsingle ran\n" and linked


def test_failed_install_script_is_an_infra_error_with_its_output(tmp_path):
    async def fn(sandbox):
        await sh(sandbox, "echo fetching; echo 'E404 not found' >&2; exit 1", timeout=30, what="npm install x@9")

    with pytest.raises(InfraError, match=r"npm install x@9 failed \(exit 1\): fetching\nE404") as err:
        in_sandbox(tmp_path, fn)
    assert err.value.failure_class == "harness_install"


@pytest.mark.parametrize("name, config", [("pool", {"agent_confg": {}}), ("opencode", {"permissions": {}}),
                                          ("mini-swe-agent", {"step_limits": 3}), ("oracle", {"x": 1})])
def test_unknown_harness_config_keys_are_user_errors(name, config):
    from sandbatch.core.errors import UserError
    from sandbatch.harness import get_harness

    harness = get_harness(name)
    with pytest.raises(UserError, match=f"harness.config: unknown key '{next(iter(config))}' for harness {name}"):
        harness.check_config(harness.options_of(config))
    harness.check_config(harness.options_of({"inline_think": True, "install": {"method": "path", "path": "x"}}
                                              if name != "oracle" else {"inline_think": True}))
