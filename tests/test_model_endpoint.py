"""A failing model endpoint is an infrastructure failure, never the agent's: the failure
classes of the proxy's records, the rollout's verdict from them, the early stop, and real
runs of mini-swe-agent against real servers that refuse, answer 503 or answer 401."""

from __future__ import annotations

import asyncio
import json
import re
import socket

import httpx
import pytest
from aiohttp import web

from docker_fixtures import docker_base_image, docker_engine  # noqa: F401 (fixtures)
from failing_model import failing_model
from real_opensandbox import real_opensandbox  # noqa: F401 (fixture)
from harness_support import leftover_sandboxes, rollout, run_workflow, smoke_config
from sandbatch.contracts.model_calls import ENDPOINT_FAILURES, outage, status_failure
from sandbatch.core.util import iter_jsonl
from sandbatch.proxy import ModelProxy
from sandbatch.proxy.server import ServerThread, catch_all
from workflow_util import SMOKE_TASKS

CHAT = {"model": "m", "messages": [{"role": "user", "content": "fix it"}]}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Failing(ServerThread):
    """Answers every request with `status`."""

    def __init__(self, status: int):
        self.status = status
        super().__init__(catch_all(self.handle), name="failing-upstream")

    async def handle(self, request):
        return web.json_response({"error": {"message": f"status {self.status} on purpose"}}, status=self.status)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/v1"


def _proxy(url: str, tmp_path, **settings) -> ModelProxy:
    return ModelProxy({"require_agent_key": False, "retries": 1, "backoff": 0.01, "connect_timeout": 1, **settings},
                      url, None, tmp_path / "model_calls.jsonl")


def test_each_failure_of_the_endpoint_is_recorded_with_its_class(tmp_path):
    """Refused connection, 503 after the retries, 401, 404: each call's record names its class;
    a 400 (a request the agent built) names none."""
    seen = {}
    for status in (503, 429, 401, 403, 404, 400, 422):
        server = Failing(status)
        server.start()
        try:
            with _proxy(f"http://127.0.0.1:{server.port}/v1", tmp_path / str(status)) as p:
                assert httpx.post(p.url_for("127.0.0.1") + "/chat/completions", json=CHAT).status_code == status
        finally:
            server.stop()
        seen[status] = next(iter_jsonl(tmp_path / str(status) / "model_calls.jsonl")).get("endpoint_failure")
    with _proxy(f"http://127.0.0.1:{_closed_port()}/v1", tmp_path / "refused") as p:
        assert httpx.post(p.url_for("127.0.0.1") + "/chat/completions", json=CHAT).status_code == 502
    seen["refused"] = next(iter_jsonl(tmp_path / "refused" / "model_calls.jsonl"))["endpoint_failure"]
    assert seen == {503: "model_unavailable", 429: "model_unavailable", 401: "model_auth", 403: "model_auth",
                    404: "model_not_found", 400: None, 422: None, "refused": "model_unreachable"}
    assert set(seen.values()) - {None} == set(ENDPOINT_FAILURES)


def test_the_proxy_says_down_after_failures_in_a_row_not_before(tmp_path):
    server = Failing(503)
    server.start()

    async def go():
        with _proxy(f"http://127.0.0.1:{server.port}/v1", tmp_path, stop_after_failures=3) as p:
            down = p.down()
            url = p.url_for("127.0.0.1") + "/chat/completions"
            async with httpx.AsyncClient(timeout=60) as client:  # a 503 comes after the proxy's retry
                for n in range(1, 4):
                    assert not down.is_set(), f"down after {n - 1} failed calls"
                    assert (await client.post(url, json=CHAT)).status_code == 503
            await asyncio.wait_for(down.wait(), 30)  # set from the proxy's thread
            return p.outage

    try:
        assert asyncio.run(go()) == "model_unavailable"
    finally:
        server.stop()


def _row(status, failure=None, **kw):
    return {"endpoint": "chat", "status": status, **({"endpoint_failure": failure} if failure else {}), **kw}


def test_the_rollout_is_the_endpoints_failure_when_its_last_call_was():
    good, down = _row(200), _row(503, "model_unavailable", error="still down")
    assert outage([good, good, down]) == ("model_unavailable", down, 1, 3)  # good calls, then an outage
    assert outage([down, good]) is None  # met a passing failure and went on
    assert outage([good, _row(400)]) is None  # a request the agent built: the agent's failure
    assert outage([]) is None
    # the proxy's own refusals (caps), calls cut off by the proxy's stop, other paths: not calls
    capped = _row(400, refused="max_calls")
    assert outage([down, capped, _row(None), {"endpoint": "models", "status": 401, "endpoint_failure": "x"}]) == (
        "model_unavailable", down, 1, 1)
    assert [status_failure(s) for s in (200, 400, 401, 404, 429, 500, 502)] == [
        None, None, "model_auth", "model_not_found", "model_unavailable", "model_unavailable", "model_unavailable"]


# --- through the real workflow: mini-swe-agent on this host, local sandboxes -----------------

LOOK = {"content": "Looking around.", "tool_calls": [{"name": "bash", "arguments": {"command": "env; ls"}}]}
CALC_EDIT = {"content": "Fixing.", "tool_calls": [{"name": "bash", "arguments": {
    "command": "sed -i 's|a // b|a / b|' calc.py"}}]}
SUBMIT = {"content": "Submitting.", "tool_calls": [{"name": "bash", "arguments": {
    "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}]}
SCRIPT = {"tasks": {"divide() truncates": [LOOK, CALC_EDIT]}, "default": [LOOK] * 20, "final": SUBMIT}
CALC, SLUG, DURATION = "smoke__calc-1", "smoke__textutils-1", "smoke__duration-1"
FAST_PROXY = {"retries": 1, "backoff": 0.05, "connect_timeout": 2}


def _run(tmp_path, url, tasks, graded_nothing=False, **extra):
    """mini-swe-agent on this host against `url` (None: the config names no endpoint)."""
    harness = {"name": "mini-swe-agent", "config": {"mode": "host", "step_limit": 3}}
    model = {"proxy": FAST_PROXY, **({"base_url": url} if url else {})}
    cfg = smoke_config(tmp_path, harness, tasks, model=model,
                       timeouts={"agent": 300}, aggregate={"exports": ["gym"]}, **extra)
    return run_workflow(tmp_path, cfg, graded_nothing=graded_nothing)


def _rows(run_dir):
    return {r["instance_id"]: r for r in map(json.loads, (run_dir / "rollouts.jsonl").read_text().splitlines())}


@pytest.mark.slow
def test_503_and_401_end_infra_error_retried_and_kept_out_of_the_metrics(tmp_path, monkeypatch):
    """calc: a working endpoint (resolved); textutils: 401 from the first call; duration: one
    good call, then 503 on every completion. The config names no endpoint and no key
    variable: OPENAI_BASE_URL and OPENAI_API_KEY give them."""
    slug, duration = "slugify() leaves", "parse_duration() rejects"
    secret = "sk-openai-7d3e1c9b0a5f"
    with failing_model(SCRIPT, {slug: (0, 401), duration: (1, 503)}) as (url, model):
        monkeypatch.setenv("OPENAI_BASE_URL", url)
        monkeypatch.setenv("OPENAI_API_KEY", secret)
        run_dir, took = _run(tmp_path, None, [CALC, SLUG, DURATION], retries=1)
    assert model.calls[slug] == 2  # mini stops at a 401; once per attempt
    # the key went upstream as a Bearer key on every request (the model list too), never to
    # the agent: its sandbox's environment has no key, no file of the run holds it
    assert {r["authorization"] for r in model.requests} == {f"Bearer {secret}"}
    assert {r["path"] for r in model.requests} >= {"/v1/models", "/v1/chat/completions"}
    settings = json.loads((run_dir / "_settings" / "run.json").read_text())
    assert settings["model"]["base_url"] == url and settings["model"]["api_key_env"] is None
    seen = json.dumps(rollout(run_dir, CALC, "events.jsonl"))
    assert "HOME=" in seen and "OPENAI_API_KEY" not in seen
    assert [p for p in tmp_path.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()] == []
    for task, failure, status in ((SLUG, "model_auth", 401), (DURATION, "model_unavailable", 503)):
        h = rollout(run_dir, task, "harness.json")
        assert (h["status"], h["failure_class"], h["attempt"]) == ("infra_error", failure, 2), h
        assert f"failing on purpose with {status}" in h["error"], h["error"]
        # stopped as soon as the endpoint was down, not at the agent's 300 s timeout
        assert h["duration_s"] < 60, h
        assert rollout(run_dir, task, "grade.json")["status"] == "infra_error"
    assert rollout(run_dir, CALC, "grade.json")["reward"] == 1.0
    rows = _rows(run_dir)
    assert {t: (r["status"], r["failure_class"]) for t, r in rows.items()} == {
        CALC: ("ok", None), SLUG: ("infra_error", "model_auth"), DURATION: ("infra_error", "model_unavailable")}
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["failure_classes"] == {"model_unavailable": 1, "model_auth": 1}
    # the outages are no samples: pass@1 is calc's alone
    assert metrics["pass_at_k"] == {"1": 100.0} and metrics["mean_reward"] == 1.0, metrics
    assert metrics["resolved_rate_excluding_infra_errors"] == {"value": 1.0, "numerator": 1, "denominator": 1}
    failures = [json.loads(line) for line in (run_dir / "gym" / "rollouts_failures.jsonl").read_text().splitlines()]
    assert sorted((f["instance_id"], f["_ng_failure_class"]) for f in failures) == [
        (DURATION, "model_unavailable"), (SLUG, "model_auth")]
    graded = [json.loads(line)["instance_id"] for line in (run_dir / "gym" / "rollouts.jsonl").read_text().splitlines()]
    assert graded == [CALC]
    assert leftover_sandboxes(tmp_path) == []
    print(f"\nok/401/503, retries 1: workflow {took:.1f} s")


@pytest.mark.slow
def test_an_endpoint_gone_after_good_calls_is_infra_error(tmp_path):
    """The boundary: an agent that made good calls and then met a refused connection."""
    with failing_model(SCRIPT, {"divide() truncates": (2, "refuse")}) as (url, model):
        # its only rollout an outage: the run graded nothing, and fails saying so
        run_dir, took = _run(tmp_path, url, [CALC], graded_nothing=True)
    h = rollout(run_dir, CALC, "harness.json")
    assert (h["status"], h["failure_class"]) == ("infra_error", "model_unreachable"), h
    failed, calls = map(int, re.search(r"\((\d+) of (\d+) model calls failed", h["error"]).groups())
    assert failed >= 3 and calls == failed + 2, h["error"]  # stopped after 3 failures in a row
    calls = rollout(run_dir, CALC, "model_calls.jsonl")
    assert [c["status"] for c in calls][:2] == [200, 200] and calls[-1]["endpoint_failure"] == "model_unreachable"
    assert _rows(run_dir)[CALC]["status"] == "infra_error"
    assert leftover_sandboxes(tmp_path) == []
    print(f"\nrefused after 2 good calls: workflow {took:.1f} s")


# --- the ecosystem's conventions: OPENAI_BASE_URL, OPENAI_API_KEY -----------------------------

def test_endpoint_and_key_precedence(monkeypatch):
    from sandbatch.core.config import parse

    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "SITE_URL", "SITE_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://openai-env:1/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    assert parse({}).model.base_url == "http://openai-env:1/v1"  # the config names no URL
    assert parse({"model": {"base_url": "http://config:2/v1"}}).model.base_url == "http://config:2/v1"
    named = {"model": {"base_url": "http://config:2/v1", "base_url_env": "SITE_URL"}}
    assert parse(named).model.base_url == "http://config:2/v1"  # SITE_URL unset: the config value
    monkeypatch.setenv("SITE_URL", "http://site:3/v1")
    assert parse(named).model.base_url == "http://site:3/v1"
    assert parse({"model": {"base_url_env": "SITE_URL"}}).model.base_url == "http://site:3/v1"
    assert parse({}).model.upstream_key() == "sk-openai"  # no key variable named
    assert parse({"model": {"api_key_env": "SITE_KEY"}}).model.upstream_key() is None  # named, unset: no fallback
    monkeypatch.setenv("SITE_KEY", "sk-site")
    assert parse({"model": {"api_key_env": "SITE_KEY"}}).model.upstream_key() == "sk-site"


def test_version():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "sandbatch.cli", "--version"], capture_output=True, text=True)
    from sandbatch import __version__

    assert out.returncode == 0 and out.stdout.strip() == f"sandbatch {__version__}"


# --- preflight: before anything is created ------------------------------------------------------

def _preflight_run(tmp_path, model):
    """The real workflow on one smoke task with mini-swe-agent; (its exit code, its stderr)."""
    from workflow_util import snakemake, write_config

    harness = {"name": "mini-swe-agent", "config": {"mode": "host"}}
    tmp_path.mkdir()
    config = write_config(tmp_path, "config.yaml", smoke_config(tmp_path, harness, [CALC], model=model))
    proc = snakemake(tmp_path, "--configfile", str(config))
    return proc.returncode, proc.stderr


def _nothing_created(tmp_path):
    run_dir = tmp_path / "results" / "t"
    return not (run_dir / CALC).exists() and not (tmp_path / "sandboxes").exists()


@pytest.mark.slow
def test_preflight_stops_a_run_whose_endpoint_cannot_serve_it(tmp_path):
    """Nothing listens; 401 on every request; a model the endpoint does not serve: one line
    naming the config file, the key and the fix, and nothing created."""
    from harness_support import scripted_model_server

    cases = []
    code, err = _preflight_run(tmp_path / "refused", {"base_url": f"http://127.0.0.1:{_closed_port()}/v1", "name": "m"})
    cases.append((code, err, tmp_path / "refused", r"config\.yaml: model\.base_url: .*/v1/models did not answer "
                  r"with a model list .*Connect call failed.*; start the model server"))
    server = Failing(401)
    server.start()
    try:
        code, err = _preflight_run(tmp_path / "auth", {"base_url": server.url, "name": "m"})
    finally:
        server.stop()
    cases.append((code, err, tmp_path / "auth", r"config\.yaml: model\.api_key_env: .*/v1/models answered 401 .*; "
                  r"export the endpoint's API key in OPENAI_API_KEY or name its variable in model\.api_key_env"))
    with scripted_model_server(SCRIPT) as (url, _):
        code, err = _preflight_run(tmp_path / "name", {"base_url": url, "name": "gpt-9"})
    cases.append((code, err, tmp_path / "name", r"config\.yaml: model\.name: 'gpt-9' is not among the models "
                  r".*/v1/models serves \(scripted\); set model\.name to one of them"))
    for code, err, where, expected in cases:
        errors = [line for line in err.splitlines() if line.startswith("sandbatch: error:")]
        assert code != 0 and len(errors) == 1 and re.search(expected, errors[0]), err[-3000:]
        assert "Traceback" not in err and _nothing_created(where), err[-3000:]


def test_validate_checks_urls_and_sampling_offline_and_the_rest_with_preflight(tmp_path, capsys, monkeypatch):
    from sandbatch.cli import main

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)

    def validate(model, *flags, **extra):
        path = tmp_path / "v.yaml"
        path.write_text(json.dumps({"harness": {"name": "mini-swe-agent"}, "model": model, **extra}))
        code = main(["validate", str(path), *flags])
        return code, capsys.readouterr().err

    for url, fixed in (("localhost:18555/v1", "http://localhost:18555/v1"),
                       ("htp:/localhost:8000", "http://localhost:8000")):
        code, err = validate({"base_url": url, "name": "m"})
        assert code == 2 and err.strip() == (f"sandbatch: error: {tmp_path}/v.yaml: model.base_url: {url!r} is not an "
                                             f"http(s) URL; write it as {fixed}")
    code, err = validate({"base_url": "http://127.0.0.1:9/v1", "name": "m", "sampling": {"temprature": 0.5}})
    assert code == 2 and "model.sampling.temprature: not a request field of the OpenAI APIs (did you mean " \
                         "'temperature'?)" in err
    code, err = validate({"base_url": "http://127.0.0.1:9/v1", "name": "m", "sampling": {"mirostat": 2}})
    assert code == 0 and "# note: model.sampling.mirostat is not a request field known here" in err
    code, err = validate({"base_url": f"http://127.0.0.1:{_closed_port()}/v1", "name": "m"}, "--preflight")
    assert code == 2 and f"{tmp_path}/v.yaml: model.base_url: " in err and "did not answer with a model list" in err
    with failing_model(SCRIPT, {}) as (url, model):
        code, err = validate({"base_url": url, "name": "scripted"}, "--preflight")
    assert code == 0 and "the model endpoint, the sandbox service and the images answer" in err, err
    assert [r["path"] for r in model.requests] == ["/v1/models"]  # asked once, nothing else
    code, err = validate({"base_url": "http://127.0.0.1:9/v1", "name": "m"},
                         benchmark={"kind": "smoke", "tasks": str(tmp_path / "gone.jsonl")})
    assert code == 2 and err.startswith(f"sandbatch: error: {tmp_path}/v.yaml: benchmark.tasks: "), err
    code, err = validate({"base_url": "http://127.0.0.1:9/v1", "name": "m", "samplng": {}})
    assert code == 2 and "unknown key 'samplng' under model (did you mean 'sampling'?)" in err


def test_validate_preflight_asks_the_docker_engine_for_every_image(tmp_path, capsys, docker_base_image):
    from sandbatch.cli import main

    def validate(sandbox):
        path = tmp_path / "d.yaml"
        path.write_text(json.dumps({"harness": {"name": "none"}, "sandbox": {"provider": "docker", **sandbox},
                                    "benchmark": {"kind": "smoke", "tasks": str(SMOKE_TASKS)}}))
        code = main(["validate", str(path), "--preflight"])
        return code, capsys.readouterr().err.strip().splitlines()[-1]

    assert validate({"default_image": docker_base_image, "docker": {"pull": "never"}})[0] == 0
    code, err = validate({"default_image": "sandbatch/no-such-image:0", "docker": {"pull": "never"}})
    assert code == 2 and err == (f"sandbatch: error: {tmp_path}/d.yaml: sandbox.docker.pull: image "
                                 "sandbatch/no-such-image:0 is not on the engine and sandbox.docker.pull is never; "
                                 "docker pull it first, or set sandbox.docker.pull: missing")
    # pulled when missing: the registry is asked for its manifest (it has none, or is out of reach)
    code, err = validate({"default_image": "sandbatch/no-such-image:0"})
    assert code == 2 and err.startswith(f"sandbatch: error: {tmp_path}/d.yaml: sandbox.default_image: image "
                                        "sandbatch/no-such-image:0 is not on the engine and its registry does not "
                                        "have it ("), err
    rewrites = [{"prefix": "sandbatch/", "replace": "sandbatch-mirror/"}]
    code, err = validate({"default_image": "sandbatch/no-such-image:0", "image_rewrites": rewrites})
    assert code == 2 and "d.yaml: sandbox.image_rewrites: image sandbatch-mirror/no-such-image:0 " in err, err
    code, err = validate({"default_image": docker_base_image, "docker": {"host": f"tcp://127.0.0.1:{_closed_port()}"}})
    assert code == 2 and "d.yaml: sandbox.docker.host: Docker engine not reachable" in err, err


def test_validate_preflight_asks_the_opensandbox_server(tmp_path, capsys, monkeypatch, real_opensandbox):
    from sandbatch.cli import main

    def validate(options):
        path = tmp_path / "o.yaml"
        path.write_text(json.dumps({"harness": {"name": "none"}, "sandbox": {
            "provider": "opensandbox", "default_image": "sandbatch/base:bookworm", "opensandbox": options},
            "benchmark": {"kind": "smoke", "tasks": str(SMOKE_TASKS)}}))
        code = main(["validate", str(path), "--preflight"])
        return code, capsys.readouterr().err.strip().splitlines()[-1]

    fast = {"operations": {"retries": 0, "timeout": 10}}
    assert validate(real_opensandbox.options(**fast))[0] == 0
    monkeypatch.setenv("SANDBATCH_TEST_WRONG_KEY", "not-the-key")
    wrong = real_opensandbox.options(**fast)
    wrong["connection"]["api_key_env"] = "SANDBATCH_TEST_WRONG_KEY"
    code, err = validate(wrong)
    assert code == 2 and "o.yaml: sandbox.opensandbox.connection.api_key_env: " in err and "refused the API key" in err
    code, err = validate(real_opensandbox.options(domain=f"127.0.0.1:{_closed_port()}", **fast))
    assert code == 2 and "o.yaml: sandbox.opensandbox.connection.domain: the OpenSandbox server does not answer" in err
