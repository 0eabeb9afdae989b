"""The opensandbox SDK versions the provider supports: declared once in the provider
(SDK_VERSIONS) and in pyproject.toml, checked when the provider starts, and exercised on
the real OpenSandbox server with the lowest version of the range (the rest of the suite
runs the installed one, the highest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement


from real_opensandbox import IMAGE, KEY_ENV, real_opensandbox, reap_run  # noqa: E402,F401 (fixture)
from suite import unique_run  # noqa: E402

from sandbatch.core.errors import UserError  # noqa: E402
from sandbatch.sandbox.opensandbox import SDK_VERSIONS, check_sdk  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LOWEST = "1.1.0"


def test_declared_once_and_installed_in_range():
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    declared = [Requirement(d) for d in deps if Requirement(d).name == "opensandbox"]
    assert [str(r.specifier) for r in declared] == [str(Requirement(f"opensandbox{SDK_VERSIONS}").specifier)]
    assert version("opensandbox") in declared[0].specifier
    assert LOWEST in declared[0].specifier and "1.0.9" not in declared[0].specifier


@pytest.mark.parametrize("installed", ["1.0.9", "1.2.0", "0.1.16"])
def test_an_sdk_outside_the_range_is_a_user_error(installed):
    with pytest.raises(UserError) as err:
        check_sdk(installed)
    assert installed in str(err.value) and f"pip install 'opensandbox{SDK_VERSIONS}'" in str(err.value)
    assert "\n" not in str(err.value)


SCRIPT = """
import asyncio, json, sys
import opensandbox
from importlib.metadata import version
from sandbatch.sandbox import SandboxSpec, provider_class

async def main(options, run, image):
    async with provider_class("opensandbox")(options) as p:
        sb = await p.create(SandboxSpec(image=image, labels={"run": run}, ttl_seconds=300))
        try:
            res = await sb.exec("pwd; cat", timeout=60, stdin=b"in")
            await sb.upload("/tmp/sandbatch/b.bin", bytes(range(256)))
            back = await sb.download("/tmp/sandbatch/b.bin")
            listed = [i.id for i in await p.list({"run": run})]
            again = await p.connect(sb.id, sb.spec)
            res2 = await again.exec("echo again", timeout=60)
        finally:
            await sb.delete()
        return {"sdk": version("opensandbox"), "from": opensandbox.__file__, "stdout": res.stdout,
                "bytes": back == bytes(range(256)), "listed": listed == [sb.id], "again": res2.stdout,
                "left": await p.list({"run": run})}

print(json.dumps(asyncio.run(main(*json.loads(sys.argv[1])))))
"""


def test_lowest_supported_sdk_on_the_real_server(real_opensandbox, tmp_path):
    target = tmp_path / "sdk"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                          f"opensandbox=={LOWEST}"], capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr[-2000:]
    run = unique_run("sdk")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(REPO / "src")]), KEY_ENV: real_opensandbox.key}
    try:
        out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps([real_opensandbox.options(), run, IMAGE])],
                             capture_output=True, text=True, timeout=300, env=env)
    finally:
        left = reap_run(real_opensandbox, run)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["sdk"] == LOWEST and result["from"].startswith(str(target))
    assert result["stdout"] == "/testbed\nin\n" and result["bytes"] and result["listed"]
    assert result["again"] == "again\n" and result["left"] == [] and left == []
