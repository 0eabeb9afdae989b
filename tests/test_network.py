"""What a rollout's sandboxes reach (steps/network.py), on the real Docker engine.

The agent's sandbox, once restricted, reaches the rollout's model proxy (a real ModelProxy in
front of the scripted model) and nothing else: not another service of this host bound to the
same address, not this host's other addresses, no name resolution. A grading sandbox reaches
nothing. A Terminal-Bench task that declares allow_internet keeps the network in both phases,
and the rollout's records say so. No traffic leaves this host: every address tried is one this
test owns, or a name that must fail to resolve.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import subprocess
import threading
from pathlib import Path

import pytest

from docker_fixtures import (OPENCODE_PREFIX, agent_image, containers, docker_base_image, docker_engine,  # noqa: F401
                             docker_run_label, no_python_image)
from harness_support import CALC_EDIT, fix_turns, items_of, rollout, scripted_model_server
from real_opensandbox import IMAGE, real_opensandbox, with_provider  # noqa: F401 (fixture)
from suite import unique_run
from sandbatch.sandbox import SandboxError
from sandbatch.proxy import ModelProxy
from sandbatch.sandbox.docker import DockerProvider
from sandbatch.sandbox.route import route_source
from sandbatch.sandbox.base import SandboxSpec
from sandbatch.sandbox.docker import DockerProvider
from sandbatch.sandbox.local import LocalProvider
from sandbatch.steps import network
from sandbatch.tasks import Task
from sandbatch.testing.scripted_model import Script, ScriptedModel
from workflow_util import rollouts, snakemake, write_config

# connect attempts from inside a sandbox: what each address answered
PROBE = r"""
import json, socket, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor

def connect(target):
    name, host, port = target
    s = socket.socket()
    s.settimeout(1)  # a service of this host answers at once; one that is cut off never does
    try:
        s.connect((host, port))
        return name, "connected"
    except OSError as exc:
        return name, type(exc).__name__
    finally:
        s.close()

def resolve(_):
    try:
        socket.getaddrinfo("pypi.org", 443)
        return "resolve", "resolved"
    except OSError as exc:
        return "resolve", type(exc).__name__

with ThreadPoolExecutor(8) as pool:  # at once: each refusal may take its whole timeout
    out = dict(pool.map(lambda t: resolve(t) if t is None else connect(t), [None, *json.loads(sys.argv[1])]))
if len(sys.argv) > 2:
    req = urllib.request.Request(sys.argv[2], headers={"Authorization": "Bearer " + sys.argv[3]})
    out["models"] = json.loads(urllib.request.urlopen(req, timeout=10).read())["data"][0]["id"]
print(json.dumps(out))
"""


class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"answer\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def host_service():
    """A service of this host other than the proxy, bound where the proxy binds for docker
    (all addresses): its port."""
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def probe(sb, targets: list[tuple[str, str, int]], *extra: str) -> dict:
    res = asyncio.run(sb.exec(["python3", "-c", PROBE, json.dumps(targets), *extra], timeout=90, cwd="/",
                              env={"RES_OPTIONS": "timeout:1 attempts:1"}))
    assert res.exit_code == 0, res.stderr[-2000:]
    return json.loads(res.stdout)


def spec(image: str, label: str, **kw) -> SandboxSpec:
    return SandboxSpec(image=image, workdir="/testbed", labels={"run": label, "task": "t1"}, ttl_seconds=600, **kw)


def test_the_agent_reaches_its_model_proxy_and_nothing_else(tmp_path, docker_engine, docker_base_image,
                                                             docker_run_label, host_service):
    model = ScriptedModel(Script.from_dict({"models": ["scripted-m"]}))
    upstream = model.serve()
    bind, advertise = DockerProvider.proxy_hosts
    proxy = ModelProxy({}, f"http://127.0.0.1:{upstream.port}/v1", None, tmp_path / "calls.jsonl", bind_host=bind)
    provider = DockerProvider()
    outside = route_source("192.0.2.1:9")  # this host's address off the host
    try:
        with proxy:
            sb = asyncio.run(provider.create(spec(docker_base_image, docker_run_label)))
            # created on the engine's network (the install's): the host's service answers
            assert probe(sb, [("service", advertise, host_service)])["service"] == "connected"
            rec = asyncio.run(network.restrict_agent(sb, Task(id="t1", instance_id="t1"),
                                                     (advertise, proxy.port), ""))
            assert (rec.policy, rec.enforced) == ("model_only", True), rec
            gate = rec.model_address.rsplit(":", 1)[0]
            seen = probe(sb, [("service", advertise, host_service), ("service_by_gate", gate, host_service),
                              ("proxy_by_host", advertise, proxy.port), ("outside", outside, host_service)],
                         proxy.url_for(gate) + "/models", proxy.agent_key)
            assert seen["models"] == "scripted-m", seen  # the proxy answers, through the gate
            assert all(seen[k] != "connected" for k in ("service", "service_by_gate", "proxy_by_host", "outside")), seen
            assert seen["resolve"] != "resolved", seen
            asyncio.run(provider.delete(sb.id))
    finally:
        upstream.stop()
    # the gate and its network went with the sandbox
    left = containers(docker_engine, run=docker_run_label)
    nets = subprocess.run([docker_engine, "network", "ls", "-q", "--filter", f"label=sandbatch.run={docker_run_label}"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert (left, nets) == ([], [])


def test_a_sandbox_without_a_model_client_and_a_grading_sandbox_reach_nothing(docker_engine, docker_base_image,
                                                                             docker_run_label, host_service):
    provider = DockerProvider()
    task = Task(id="t1", instance_id="t1")
    agent = asyncio.run(provider.create(spec(docker_base_image, docker_run_label)))
    rec = asyncio.run(network.restrict_agent(agent, task, None, "the agent's model client runs on this host"))
    assert (rec.policy, rec.enforced, rec.model_address) == ("none", True, None)
    grading = asyncio.run(provider.create(spec(docker_base_image, docker_run_label,
                                               allow_internet=network.grading_allows_internet(task))))
    assert network.grading_record(provider, task).policy == "none"
    outside = route_source("192.0.2.1:9")  # this host's address off the host
    for sb in (agent, grading):
        seen = probe(sb, [("service", "host.docker.internal", host_service), ("outside", outside, host_service)])
        assert "connected" not in seen.values() and seen["resolve"] != "resolved", seen
        devices = asyncio.run(sb.exec("cat /proc/net/dev", timeout=30)).stdout
        assert "eth0" not in devices and "lo:" in devices


def test_a_gate_image_without_python_is_named_in_the_error(docker_engine, docker_base_image, no_python_image,
                                                           docker_run_label):
    provider = DockerProvider({"gate_image": no_python_image})
    sb = asyncio.run(provider.create(spec(docker_base_image, docker_run_label)))
    with pytest.raises(SandboxError, match="sandbox.docker.gate_image") as failed:
        asyncio.run(network.restrict_agent(sb, Task(id="t1", instance_id="t1"), ("host.docker.internal", 9), ""))
    assert failed.value.failure_class == "sandbox_network"
    asyncio.run(provider.delete(sb.id))


def test_an_opensandbox_server_without_egress_refuses_and_the_error_says_how(real_opensandbox, capsys):
    """The real server here has no egress sidecar image: it refuses any network policy."""
    async def create(provider):
        return await provider.create(spec(IMAGE, unique_run("net"), allow_internet=False))

    async def record(provider):
        return network.grading_record(provider, Task(id="t1", instance_id="t1"))

    with pytest.raises(SandboxError, match="network_policy: false") as refused:
        with_provider({**real_opensandbox.options(), "network_policy": True}, create)
    assert refused.value.failure_class == "sandbox_network"
    # with policies off nothing is restricted, and the record says so
    rec = with_provider(real_opensandbox.options(), record)
    assert (rec.policy, rec.enforced) == ("none", False)
    assert "warning: the opensandbox provider cannot restrict" in capsys.readouterr().err


def test_local_cannot_isolate_and_says_so(capsys):
    rec = network.grading_record(LocalProvider({"root": "/nonexistent"}), Task(id="t1", instance_id="t1"))
    assert (rec.policy, rec.enforced) == ("none", False) and "cannot restrict" in rec.note
    assert "warning: the local provider cannot restrict" in capsys.readouterr().err
    # a task that declares the internet is given it: nothing to enforce
    declared = Task(id="t1", instance_id="t1", allow_internet=True)
    assert network.grading_record(LocalProvider({"root": "/nonexistent"}), declared).enforced is True


TB_TASK = """version = "1.0"
[verifier]
timeout_sec = 60.0
[agent]
timeout_sec = 60.0
[environment]
docker_image = "ghcr.io/example/tb-fetch:20251031"
{declaration}
"""
FETCH = ("python3 -c \"import urllib.request; print(urllib.request.urlopen("
         "'http://host.docker.internal:{port}/', timeout=5).read().decode().strip())\"")


def fetch_task(root: Path, name: str, port: int, declaration: str) -> None:
    """A task solved by fetching the answer from this host; its verifier fetches it again."""
    d = root / name
    for sub in ("environment", "solution", "tests"):
        (d / sub).mkdir(parents=True)
    (d / "task.toml").write_text(TB_TASK.format(declaration=declaration))
    (d / "instruction.md").write_text("Put the answer the service gives into /app/answer.txt.\n")
    (d / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\n")
    (d / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{FETCH.format(port=port)} > /app/answer.txt\n")
    (d / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\n"
        f"if [ \"$(cat /app/answer.txt)\" = answer ] && [ \"$({FETCH.format(port=port)})\" = answer ]; then\n"
        "  echo 1 > /logs/verifier/reward.txt\nelse\n  echo 0 > /logs/verifier/reward.txt\nfi\n")


@pytest.mark.slow
def test_a_terminal_bench_task_that_declares_internet_gets_it_and_the_rollout_says_so(
        tmp_path, docker_engine, docker_base_image, host_service):
    run = unique_run("net")
    tasks = tmp_path / "tasks"
    fetch_task(tasks, "declared", host_service, "allow_internet = true")
    fetch_task(tasks, "undeclared", host_service, "")
    fetch_task(tasks, "denied", host_service, "allow_internet = false")
    config = tmp_path / "tb.yaml"
    config.write_text(json.dumps({
        "run": run, "harness": {"name": "oracle"}, "retries": 0,
        "benchmark": {"kind": "terminal_bench", "tasks": str(tasks)},
        "sandbox": {"provider": "docker", "image_rewrites": [
            {"prefix": "ghcr.io/example/tb-fetch:20251031", "replace": docker_base_image}]}}))
    proc = snakemake(tmp_path, "--configfile", str(config))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r["instance_id"]: r for r in rollouts(tmp_path, run)}
    assert rows["declared"]["resolved"] and rows["declared"]["reward"] == 1.0, rows["declared"]
    # the same task without the declaration: its solution's fetch reaches nothing (the oracle's
    # script fails: the agent's failure, not the infrastructure's); its verifier keeps the
    # network as Harbor gives it unless the task says allow_internet = false
    for name in ("undeclared", "denied"):
        row = rows[name]
        assert (row["resolved"], row["reward"], row["failure_class"]) == (False, 0.0, "agent_exit"), row
    expected = {"declared": ("open", "open", "declares allow_internet"),
                "undeclared": ("none", "open", "Terminal-Bench's verifier"),
                "denied": ("none", "none", "grading needs no network")}
    for name, (agent, grading, why) in expected.items():
        d = tmp_path / "results" / run / rows[name]["task_id"] / "0"
        agent_net = json.loads((d / "harness.json").read_text())["network"]
        grade_net = json.loads((d / "grade.json").read_text())["network"]
        assert (agent_net["policy"], agent_net["enforced"]) == (agent, True), (name, agent_net)
        assert (grade_net["policy"], grade_net["enforced"]) == (grading, True), (name, grade_net)
        assert why in grade_net["reason"], (name, grade_net)
    left = containers(docker_engine, run=run)
    assert left == []



@pytest.mark.slow
def test_real_opencode_in_docker_reaches_its_model_and_not_the_host(tmp_path, docker_engine, agent_image,
                                                                    host_service):
    """OpenCode in a container, through the workflow: its first command tries this host's
    service (as an agent after a package index would), then it fixes the task; only the
    model, through the gate, answered."""
    check = f"{FETCH.format(port=host_service)} || echo FETCH FAILED; grep -n 'def divide' -A 2 calc.py"
    script = {"tasks": {"divide() truncates": {"turns": fix_turns(check, CALC_EDIT),
                                               "final": {"content": "divide() now returns the true quotient."}}},
              "final": {"content": "Nothing to do."}}
    run = unique_run("oc")
    harness = {"name": "opencode", "config": {"install": {"method": "path", "path": f"{OPENCODE_PREFIX}/bin/opencode"}}}
    with scripted_model_server(script) as (url, model):
        cfg = write_config(tmp_path, "config.yaml", {
            "run": run, "retries": 0, "harness": harness, "timeouts": {"agent": 300},
            "benchmark": {"instance_ids": ["smoke__calc-1"]},
            "model": {"name": "scripted", "base_url": url},
            "sandbox": {"provider": "docker", "default_image": agent_image}})
        proc = snakemake(tmp_path, "--configfile", str(cfg), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [row] = rollouts(tmp_path, run)
    assert row["resolved"] and row["status"] == "ok", row
    run_dir = tmp_path / "results" / run
    net = rollout(run_dir, "smoke__calc-1", "harness.json")["network"]
    assert (net["policy"], net["enforced"]) == ("model_only", True), net
    assert not net["model_address"].startswith("host.docker.internal"), net  # the gate's address
    first = items_of(rollout(run_dir, "smoke__calc-1", "response.json"), "function_call_output")[0]["output"]
    assert "FETCH FAILED" in first and "answer" not in first.replace("answers", ""), first
    assert len([r for r in model.requests if r["path"].endswith("/chat/completions")]) >= 3
    assert rollout(run_dir, "smoke__calc-1", "grade.json")["network"]["policy"] == "none"
    left = containers(docker_engine, run=run)
    assert left == []


def test_a_swe_bench_row_may_declare_internet(tmp_path):
    from sandbatch.tasks import swebench

    row = {"instance_id": "o__r-1", "problem_statement": "p", "patch": "", "test_patch": "", "FAIL_TO_PASS": [],
           "PASS_TO_PASS": []}
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({**row, "allow_internet": True}) + "\n" + json.dumps({**row, "instance_id": "o__r-2"}))
    declared, undeclared = (task for task, _ in swebench.scan(path))
    assert network.grading_allows_internet(declared) and not network.grading_allows_internet(undeclared)
    assert "allow_internet" not in declared.extra
