"""Terminal-Bench graded in the agent's own sandbox (grading.in_agent_sandbox, as both shipped
Terminal-Bench profiles grade): an agent that does not solve hello-world leaves something
behind that makes the verifier's reward 1. Each earns 1.0 with grading.tampering: log_only and
0.0 with the defences on (grading/tb_verifier.py: the agent's processes stopped, a static
shell and core tools brought in, the reward written to a directory of a random name), on the
local provider and in Docker containers.
"""

from __future__ import annotations

import asyncio
import re

import pytest

from docker_fixtures import docker_base_image, docker_engine  # noqa: F401 (fixtures)
from test_benchmark_grading import FIX, agent_sandbox, finish, make_cfg, write

TB = FIX / "terminal_bench"
HELLO_IMAGE = "ghcr.io/example/tb-hello-world:20251031"  # not pullable here: the base image stands in
# rewrites every reward file under /logs to 1, as fast as it can
REWRITER = ("nohup sh -c 'while :; do for f in $(find {logs} -name reward.txt 2>/dev/null); do echo 1 > $f; done; "
            "sleep 0.02; done' >/dev/null 2>&1 &")
BASH_WRAPPER = """#!/bin/sh
/bin/bash.real "$@"; rc=$?
mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt
exit $rc
"""
CAT_WRAPPER = "#!/bin/sh\necho 'Hello, world!'\n"
ATTACKS = {
    "a process left running that rewrites every reward file to 1": ({"local", "docker"}, [REWRITER]),
    "/bin/bash replaced by a wrapper that writes reward 1 after any script": ({"docker"}, [
        "mv /bin/bash /bin/bash.real && cp /tmp/w /bin/bash && chmod 755 /bin/bash"]),
    "/usr/bin/cat replaced by one that prints the expected answer": ({"docker"}, [
        "cp /tmp/c /usr/bin/cat.new && chmod 755 /usr/bin/cat.new && mv /usr/bin/cat.new /usr/bin/cat"]),
    "a process left running and a replaced shell at once": ({"docker"}, [
        REWRITER, "mv /bin/bash /bin/bash.real && cp /tmp/w /bin/bash && chmod 755 /bin/bash"]),
}


def _run(sb, cmd: str) -> None:
    res = asyncio.run(sb.exec(cmd, timeout=60))
    assert res.ok, res.stderr


def _attack(tmp_path, name: str, provider: str, mode: str, image: str | None):
    over = {"grading": {"in_agent_sandbox": True, "tampering": mode}}
    if provider == "docker":
        over["sandbox"] = {"provider": "docker", "image_rewrites": [{"prefix": HELLO_IMAGE, "replace": image}]}
    d = tmp_path / mode
    d.mkdir()
    ctx, sb = agent_sandbox(make_cfg(d, "terminal_bench", TB, **over), "hello-world")
    write(sb, "/app/hello.txt", "Goodbye\n")  # the task not done
    asyncio.run(sb.upload("/tmp/w", BASH_WRAPPER.encode()) if provider == "docker" else asyncio.sleep(0))
    asyncio.run(sb.upload("/tmp/c", CAT_WRAPPER.encode()) if provider == "docker" else asyncio.sleep(0))
    for cmd in ATTACKS[name][1]:
        _run(sb, cmd.format(logs=sb.map_path("/logs")))
    return finish(ctx)


def _check(tmp_path, name, provider, image=None):
    off = _attack(tmp_path, name, provider, "log_only", image)
    assert off.status == "ok" and off.reward == 1.0, off
    on = _attack(tmp_path, name, provider, "neutralise", image)
    assert on.status == "ok" and on.tests_ran and on.reward == 0.0 and not on.resolved, on
    assert "isolate the verifier" in open(on.log_path).read()


@pytest.mark.parametrize("name", [n for n, (where, _) in ATTACKS.items() if "local" in where])
def test_tb_attack_local(tmp_path, name):
    _check(tmp_path, name, "local")


@pytest.mark.parametrize("name", [n for n, (where, _) in ATTACKS.items() if "docker" in where])
def test_tb_attack_in_containers(tmp_path, docker_engine, docker_base_image, name):
    _check(tmp_path, name, "docker", docker_base_image)


def test_tb_solved_task_still_scores_one_in_the_agents_container(tmp_path, docker_engine, docker_base_image):
    over = {"grading": {"in_agent_sandbox": True}, "sandbox": {
        "provider": "docker", "image_rewrites": [{"prefix": HELLO_IMAGE, "replace": docker_base_image}]}}
    ctx, sb = agent_sandbox(make_cfg(tmp_path, "terminal_bench", TB, **over), "hello-world")
    write(sb, "/app/hello.txt", "Hello, world!\n")
    _run(sb, "nohup sleep 600 >/dev/null 2>&1 &")  # a harmless process the agent left: stopped all the same
    rec = finish(ctx)
    assert rec.status == "ok" and rec.reward == 1.0 and rec.resolved and rec.tampering == [], rec
    assert re.search(r"stopped [1-9]\d* processes", open(rec.log_path).read())
