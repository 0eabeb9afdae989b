"""The mini-swe-agent harness: generated config, exit statuses, conversion, and real runs.

The end-to-end tests drive the real mini-swe-agent with the scripted model through the
real workflow in both modes: its agent loop on this host with commands through the
sandbox API (the default), and installed from PyPI into a venv inside each sandbox.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gym_env import assert_valid_responses
from harness_support import (assert_token_data, items_of, leftover_sandboxes, listed_model, rollout, run_context,
                             run_workflow, scripted_model_server, smoke_config)
from workflow_util import snakemake
from sandbatch.core.errors import UserError
from sandbatch.harness import get_harness
from sandbatch.sandbox.base import SandboxSpec
from sandbatch.sandbox.local import LocalProvider

FIXTURES = Path(__file__).parent / "fixtures"
RECORDED = FIXTURES / "mini_swe_agent_2.4.1_messages.jsonl"  # ls, a bash call, three replies without a call


def convert(events):
    harness = get_harness("mini-swe-agent")
    return harness.convert(events, harness.options_of({}))


def test_convert_a_recorded_trajectory():
    messages = [json.loads(line) for line in RECORDED.read_text().splitlines()]
    conv = convert(messages)
    shape = [(i["type"], i.get("call_id")) for i in conv.items]
    assert shape == [("reasoning", None), ("message", None), ("function_call", "call_0_0"),
                     ("function_call_output", "call_0_0"), ("message", None), ("function_call", "call_1_0"),
                     ("function_call_output", "call_1_0"),
                     # the three replies mini rejected for lacking a tool call are model output too
                     ("message", None), ("message", None), ("message", None)]
    assert conv.items[0]["summary"][0]["text"] == "Let me look at the files."
    assert json.loads(conv.items[2]["arguments"])["command"] == "ls"
    assert '"returncode": 0' in conv.items[3]["output"]
    assert [i["content"][0]["text"] for i in conv.items[-3:]] == ["Done."] * 3
    assert conv.unknown == 0 and conv.metadata["exit_status"] == "RepeatedFormatError"
    # what mini said to the model: its system prompt, the task as its template rendered it, and
    # its format-error feedback after each reply it rejected
    assert conv.instructions == "You are a helpful assistant that can interact with a computer."
    assert [(i["role"], i["content"][:40]) for i in conv.input] == [("user", "Please solve this issue: divide() trunca")]
    assert [(f["after"], f["text"].split("\n")[0]) for f in conv.feedback] == [
        (item["id"], "Tool call error:") for item in conv.items[-3:]]
    assert "No tool calls found in the response" in conv.feedback[0]["text"]


def test_convert_content_parts_and_unknown_roles():
    conv = convert([{"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                    {"role": "tool", "tool_call_id": "x", "content": [{"type": "text", "text": "out"}]},
                    {"role": "critic", "content": "?"}, "not a message", {"role": "assistant", "content": None}])
    assert [(i["type"], i.get("output")) for i in conv.items] == [("message", None), ("function_call_output", "out")]
    assert conv.items[0]["content"][0]["text"] == "ab"
    assert conv.unknown == 2 and conv.metadata["unknown_types"] == {"critic": 1, "str": 1}


def test_generated_config(tmp_path):
    class Box:
        workdir = "/testbed"

    harness = get_harness("mini-swe-agent")
    ctx = run_context("mini-swe-agent", tmp_path, {"step_limit": 7, "mini_config": {
        "agent": {"step_limit": 9}, "model": {"model_kwargs": {"temperature": 0.2}}}}, agent_timeout=1000,
        api_key="sk-secret-9")
    cfg = harness.mini_config(Box(), ctx)
    assert cfg["agent"] == {"mode": "yolo", "confirm_exit": False, "step_limit": 9, "cost_limit": 0.0,
                            "wall_time_limit_seconds": 950}
    assert cfg["environment"] == {"environment_class": "sandbatch.harness.mini_env.SandboxEnvironment",
                                  "cwd": "/testbed", "timeout": 120}
    assert cfg["model"] == {"model_name": "openai/m-1", "cost_tracking": "ignore_errors",
                            "model_kwargs": {"api_base": "http://127.0.0.1:1234/v1", "temperature": 0.2}}
    assert cfg["run"] == {"task": "fix it"}
    assert "sk-secret-9" not in json.dumps(cfg)
    in_sandbox = run_context("mini-swe-agent", tmp_path, {"mode": "sandbox"})
    assert harness.mini_config(Box(), in_sandbox)["environment"]["environment_class"] == "local"
    with pytest.raises(UserError, match="install.method"):
        harness.check_config(harness.options_of({"mode": "sandbox", "install": {"method": "conda"}}))
    harness.check_config(harness.options_of({"install": {"method": "conda"}}))  # host mode installs nothing
    with pytest.raises(UserError, match="harness.config.mode: 'vm'"):
        harness.check_config(harness.options_of({"mode": "vm"}))


FAKE_MINI = """#!/usr/bin/env python3
# stands in for `mini`: writes the trajectory named by -o with the exit status in $FAKE_EXIT_STATUS
import json, os, sys, time
out = sys.argv[sys.argv.index("-o") + 1]
status = os.environ["FAKE_EXIT_STATUS"]
if status == "hang":
    time.sleep(300)
if status != "none":
    msgs = [{"role": "assistant", "content": "hi", "tool_calls": []}, {"role": "exit", "content": "",
            "extra": {"exit_status": status, "submission": ""}}]
    json.dump({"info": {"exit_status": status, "submission": "", "model_stats": {"api_calls": 1},
               "mini_version": "fake"}, "messages": msgs}, open(out, "w"))
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""


@pytest.mark.parametrize("exit_status, exit_code, expected", [
    ("Submitted", 0, ("ok", None)),
    ("LimitsExceeded", 0, ("agent_error", "step_limit")),
    ("TimeExceeded", 0, ("timeout", "agent_time_limit")),
    ("RepeatedFormatError", 0, ("agent_error", "format_error")),
    ("APIConnectionError", 1, ("agent_error", "agent_exception")),
    ("none", 0, ("agent_error", "no_trajectory")),
    ("none", 1, ("agent_error", "agent_exit")),
    ("hang", 0, ("timeout", "agent_timeout")),
])
def test_exit_status_maps_to_rollout_status(tmp_path, exit_status, exit_code, expected):
    fake = tmp_path / "mini"
    fake.write_text(FAKE_MINI)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    harness = get_harness("mini-swe-agent")
    ctx = run_context("mini-swe-agent", tmp_path, {"mode": "sandbox", "install": {"method": "path", "path": str(fake)},
                                                   "env": {"FAKE_EXIT_STATUS": exit_status, "FAKE_EXIT": exit_code}},
                      # the hang is stopped at 2 s; the others get the room a loaded machine needs to
                      # start a Python and exit, so their status is never a timeout
                      agent_timeout=2 if exit_status == "hang" else 60)

    async def go():
        provider = LocalProvider({"root": str(tmp_path / "sandboxes")})
        sandbox = await provider.create(SandboxSpec())
        try:
            await harness.install(sandbox, ctx)
            outcome = await harness.run(sandbox, ctx)
            generated = yaml.safe_load(Path(sandbox.tmpdir, "mini-swe-agent", "run.yaml").read_text())
        finally:
            await sandbox.delete()
        return outcome, generated

    outcome, generated = asyncio.run(go())
    assert (outcome.status, outcome.failure_class) == expected
    assert generated["environment"]["cwd"].endswith("/work")
    if exit_status not in ("none", "hang"):
        assert outcome.metadata["exit_status"] == exit_status
        assert outcome.events[-1]["role"] == "exit"


# --- real mini-swe-agent through the workflow ------------------------------------------------

SUBMIT = {"content": "Submitting.", "tool_calls": [{"name": "bash", "arguments": {
    "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}]}
CALC_EDIT = ("python3 - <<'EOF'\nimport pathlib\np = pathlib.Path('calc.py')\n"
             "p.write_text(p.read_text().replace('a // b', 'a / b'))\nEOF")
SLUG_EDIT = ("sed -i 's/return re.sub(r\"\\[^a-z0-9\\]\", \"-\", text)/"
             "return re.sub(r\"[^a-z0-9]+\", \"-\", text).strip(\"-\")/' textutils/slug.py && git diff")


def turns(look: str, edit: str) -> list[dict]:
    return [
        {"reasoning_content": "Find the code first.", "content": "Looking at the code.",
         "tool_calls": [{"name": "bash", "arguments": {"command": look}}]},
        {"content": "Applying the fix.", "tool_calls": [{"name": "bash", "arguments": {"command": edit}}]},
    ]


SCRIPT = {
    "tasks": {"divide() truncates": turns("grep -n 'def divide' -A 2 calc.py", CALC_EDIT),
              "slugify() leaves": turns("cat textutils/slug.py", SLUG_EDIT)},
    "final": SUBMIT,
    # any other task: look around forever (hits the step limit)
    "default": [{"content": "Still looking.", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]}] * 50,
}


@pytest.fixture
def scripted_model():
    with scripted_model_server(SCRIPT) as served:
        yield served


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["host", "sandbox"])
def test_real_mini_swe_agent_resolves_smoke_tasks(tmp_path, tmp_path_factory, scripted_model, mode):
    url, model = scripted_model
    caches = tmp_path_factory.getbasetemp()  # shared by the sandboxes of this session
    harness = {"name": "mini-swe-agent", "config": {
        "mode": mode, "step_limit": 6,
        "install": {"env": {"UV_CACHE_DIR": str(caches / "uv-cache"), "PIP_CACHE_DIR": str(caches / "pip-cache")}}}}
    tasks = ["smoke__calc-1", "smoke__textutils-1", "smoke__duration-1"]
    # no model.name: the one model the endpoint lists ("scripted") is asked once, when the run is planned
    cfg = smoke_config(tmp_path, harness, tasks, model={"base_url": url, "tokens": "on",
                                                        "prices": {"input": 2, "output": 10}},
                       timeouts={"agent": 300, "install": 600})
    run_dir, took = run_workflow(tmp_path, cfg)
    timings = {}
    assert_token_data(run_dir, tasks, model)  # model.tokens: on, calls not streamed
    for task in tasks[:2]:
        h = rollout(run_dir, task, "harness.json")
        assert (h["status"], h["exit_code"], h["metadata"]["exit_status"]) == ("ok", 0, "Submitted"), h
        timings[task] = (h["install_s"], h["agent_s"])
        resp = rollout(run_dir, task, "response.json")
        events = rollout(run_dir, task, "events.jsonl")
        assert [m["role"] for m in events][:3] == ["system", "user", "assistant"] and events[-1]["role"] == "exit"
        calls = items_of(resp, "function_call")
        assert [json.loads(c["arguments"])["command"] for c in calls][-1] == "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
        assert len(calls) == 3
        assert [o["call_id"] for o in items_of(resp, "function_call_output")] == [c["call_id"] for c in calls]
        assert items_of(resp, "reasoning")[0]["summary"][0]["text"] == "Find the code first."
        assert resp["sandbatch"]["unknown_events"] == 0
        # what the model was given, as mini's own messages record it
        assert resp["instructions"] == events[0]["content"] and resp["input"] == [
            {"role": "user", "content": events[1]["content"], "type": "message"}]
        grade = rollout(run_dir, task, "grade.json")
        assert grade["reward"] == 1.0, grade
        assert not any("traj" in f or "venv" in f for f in rollout(run_dir, task, "patch.json")["files"])
    h = rollout(run_dir, "smoke__duration-1", "harness.json")
    assert (h["status"], h["failure_class"], h["metadata"]["exit_status"]) == ("agent_error", "step_limit",
                                                                               "LimitsExceeded")
    assert len(items_of(rollout(run_dir, "smoke__duration-1", "response.json"), "function_call")) == 6
    assert rollout(run_dir, "smoke__duration-1", "grade.json")["reward"] == 0.0
    assert_valid_responses([rollout(run_dir, task, "response.json") for task in tasks])
    # through the proxy: the model sees its own name and no key (none is configured), and
    # the usage in rollouts.jsonl is exactly what it reported
    chat = [r for r in model.requests if r["path"].endswith("/chat/completions")]
    assert chat and all(r["body"]["model"] == "scripted" and "authorization" not in r["headers"] for r in chat)
    assert [r["path"] for r in model.requests if r["path"].endswith("/models")] == ["/v1/models"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["config"]["model"]["name"] == "scripted"
    assert {json.loads(p)["model_name_or_path"] for p in (run_dir / "predictions.jsonl").read_text().splitlines()} == {
        "scripted"}
    rows = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert sum(r["usage"]["input_tokens"] for r in rows) == sum(u["prompt"] for u in model.reported_usage) > 0
    assert sum(r["usage"]["output_tokens"] for r in rows) == sum(u["completion"] for u in model.reported_usage)
    # the time the model calls took, measured without traces; the report names what became of each task
    m = json.loads((run_dir / "metrics.json").read_text())
    assert m["cost"]["total"] == pytest.approx((2 * m["tokens"]["input"] + 10 * m["tokens"]["output"]) / 1e6)
    time_s = m["time_s"]
    assert time_s["source"] == "records" and time_s["rollouts"] == 3 and 0 < time_s["model"] < time_s["agent"] + \
        time_s["model"], time_s
    report = (run_dir / "report.md").read_text()
    assert re.search(r"\| smoke__duration-1 \| 0/1 \| agent_error: step_limit \| [1-9]\d* \| [\d.]+ \|", report), report
    assert "| smoke__calc-1 | 1/1 | resolved |" in report
    assert f"| cost at model.prices (total / per rollout) | {m['cost']['total']:.3g} / " in report
    assert leftover_sandboxes(tmp_path) == []
    if mode == "host":
        # the endpoint gone: the started run plans with the name it was started with
        down = snakemake(tmp_path, "-n", "--configfile", str(tmp_path / "config.yaml"), "--config",
                         'model={"base_url": "http://127.0.0.1:9/v1"}')
        assert down.returncode == 0, down.stderr[-3000:]
        assert "run t keeps model 'scripted', which it was started with" in down.stderr
    if mode == "host":  # the trajectory is saved beside the rollout, the key nowhere in it
        traj = rollout(run_dir, "smoke__calc-1", "mini.traj.json")
        assert traj["info"]["exit_status"] == "Submitted"
        assert traj["info"]["config"]["environment_type"] == "sandbatch.harness.mini_env.SandboxEnvironment"
        assert "sbx-" not in json.dumps(traj)
    print(f"\nmini-swe-agent in mode {mode}, 3 tasks: workflow {took:.1f} s; (install s, agent s): {timings}")


@pytest.mark.slow
def test_hanging_mini_swe_agent_is_stopped_at_its_timeout(tmp_path):
    fake = tmp_path / "mini"
    fake.write_text("#!/bin/sh\nexec sleep 300\n")
    fake.chmod(0o755)
    harness = {"name": "mini-swe-agent", "config": {"mode": "sandbox", "install": {"method": "path", "path": str(fake)}}}
    with listed_model() as url:  # never called
        cfg = smoke_config(tmp_path, harness, ["smoke__calc-1"], model={"name": "m", "base_url": url},
                           timeouts={"agent": 3})
        run_dir, _ = run_workflow(tmp_path, cfg)
    h = rollout(run_dir, "smoke__calc-1", "harness.json")
    assert (h["status"], h["failure_class"], h["timed_out"]) == ("timeout", "agent_timeout", True)
    assert rollout(run_dir, "smoke__calc-1", "patch.json")["sandbox_deleted"] is True
    assert leftover_sandboxes(tmp_path) == []


# --- host mode: mini's loop here, commands through the sandbox API ----------------------------

HOST_SCRIPT = {
    "tasks": {"fix it": [
        {"content": "Where am I?", "tool_calls": [{"name": "bash", "arguments": {
            "command": "echo out; echo err >&2; pwd; cd /; exit 3"}}]},
        {"content": "Wait.", "tool_calls": [{"name": "bash", "arguments": {"command": "echo started; sleep 20"}}]},
        {"content": "Still in the repo?", "tool_calls": [{"name": "bash", "arguments": {
            "command": "pwd; cd ~ && echo home-ok"}}]},
        {"content": "Done.", "tool_calls": [{"name": "bash", "arguments": {
            "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo the fix"}}]},
    ]},
    "final": {"content": "Looking.", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]},
}


def run_on_host(tmp_path, config, url, prompt="fix it", agent_timeout=120):
    harness = get_harness("mini-swe-agent")
    ctx = run_context("mini-swe-agent", tmp_path, {"command_timeout": 2, **config}, model_url=url,
                      api_key="sk-agent-7", agent_timeout=agent_timeout)
    ctx.prompt = prompt

    async def go():
        provider = LocalProvider({"root": str(tmp_path / "sandboxes")})
        sandbox = await provider.create(SandboxSpec())
        try:
            await harness.install(sandbox, ctx)
            return await harness.run(sandbox, ctx), sandbox.workdir
        finally:
            await sandbox.delete()

    return asyncio.run(go())


def observations(outcome):
    return [json.loads(m["content"]) for m in outcome.events if m.get("role") == "tool"]


def test_host_mode_runs_commands_in_the_sandbox_with_mini_semantics(tmp_path):
    with scripted_model_server(HOST_SCRIPT) as (url, model):
        outcome, workdir = run_on_host(tmp_path, {}, url)
    assert (outcome.status, outcome.exit_code, outcome.metadata["exit_status"]) == ("ok", 0, "Submitted")
    assert outcome.metadata["submission"] == "the fix\n"
    first, slow, again = observations(outcome)
    # stderr merged into the output, the task's workdir, the command's own exit code
    assert first["returncode"] == 3 and first["output"].splitlines() == ["out", "err", workdir]
    # mini's per-command timeout: return code -1 and the reason (with what output the provider kept)
    assert slow["returncode"] == -1
    assert "timed out after 2 seconds" in slow["exception_info"]
    # every command starts in the workdir again; HOME (outside the repository) exists
    assert again["output"].splitlines() == [workdir, "home-ok"]
    assert outcome.events[-1] == {"role": "exit", "content": "the fix\n",
                                  "extra": {"exit_status": "Submitted", "submission": "the fix\n"}}
    # the trajectory on disk is what the outcome holds, and the agent's key is not in it
    saved = json.loads((tmp_path / "mini.traj.json").read_text())
    assert saved["messages"] == outcome.events and "sk-agent-7" not in json.dumps(saved)
    assert all(r["headers"].get("authorization") == "Bearer sk-agent-7" for r in model.requests
               if r["path"].endswith("/chat/completions"))
    # the sandbox's uname fills mini's system template, not a placeholder
    assert outcome.events[1]["role"] == "user" and "Linux" in outcome.events[1]["content"]


def test_host_mode_limits_and_timeout(tmp_path):
    with scripted_model_server(HOST_SCRIPT) as (url, _):
        limited, _ = run_on_host(tmp_path / "a", {"step_limit": 2}, url, prompt="other task")
        stopped, _ = run_on_host(tmp_path / "b", {"command_timeout": 30}, url, agent_timeout=4)
    assert (limited.status, limited.failure_class, limited.metadata["exit_status"]) == (
        "agent_error", "step_limit", "LimitsExceeded")
    assert len(observations(limited)) == 2
    # the agent is stopped at the step's timeout even while a command runs
    assert (stopped.status, stopped.failure_class, stopped.timed_out, stopped.exit_code) == (
        "timeout", "agent_timeout", True, None)
    assert stopped.agent_s < 25


# --- the step server imports mini and litellm once and forks every harness step from there -----

FORKED_CALLS = r"""
import json, os, sys, threading
import sandbatch.harness.mini_env  # what the step server does for host mode: import, warm up
from minisweagent.models.litellm_model import LitellmModel
assert len(sandbatch.harness.mini_env.warm_up()) > 20  # litellm's lazily imported modules, now imported
assert threading.active_count() == 1, threading.enumerate()  # nothing running that a fork would lose
url, n = sys.argv[1], int(sys.argv[2])
go_r, go_w = os.pipe()
out_r, out_w = os.pipe()
pids = []
for i in range(n):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(go_w)
            os.read(go_r, 1)  # all children call at once
            model = LitellmModel(model_name="openai/scripted", cost_tracking="ignore_errors",
                                 model_kwargs={"api_base": url})
            msg = model.query([{"role": "system", "content": "You fix bugs."},
                               {"role": "user", "content": f"task [child-{i}]"}], api_key="sk-child")
            line = json.dumps({"i": i, "content": msg["content"], "command": msg["extra"]["actions"][0]["command"]})
            os.write(out_w, (line + "\n").encode())
            code = 0
        finally:
            os._exit(code)
    pids.append(pid)
os.close(go_w)  # the children's read returns: go
os.close(out_w)
codes = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids]
with os.fdopen(out_r) as out:
    print(json.dumps({"codes": codes, "replies": [json.loads(line) for line in out]}))
"""


def test_mini_and_litellm_are_fork_safe_after_import(tmp_path):
    n = 24
    script = {"tasks": {f"[child-{i}]": [{"content": f"reply {i}", "tool_calls": [
        {"name": "bash", "arguments": {"command": f"echo {i}"}}]}] for i in range(n)}}
    with scripted_model_server(script) as (url, model):
        proc = subprocess.run([sys.executable, "-c", FORKED_CALLS, url, str(n)], capture_output=True, text=True,
                              timeout=300, env={**os.environ, "MSWEA_GLOBAL_CONFIG_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["codes"] == [0] * n, proc.stderr[-3000:]
    # each child got its own conversation's reply: no connection or state shared across the fork
    assert sorted((r["i"], r["content"], r["command"]) for r in result["replies"]) == [
        (i, f"reply {i}", f"echo {i}") for i in range(n)]
    chats = [r for r in model.requests if r["path"].endswith("/chat/completions")]
    assert len(chats) == n and all(r["headers"].get("authorization") == "Bearer sk-child" for r in chats)


def test_step_server_preloads_mini_only_in_host_mode():
    from sandbatch.core.config import parse
    from sandbatch.steps.forkserver import preload_modules

    def modules(mode):
        cfg = parse({"harness": {"name": "mini-swe-agent", "config": {"mode": mode}},
                            "model": {"name": "m", "base_url": "http://127.0.0.1:9/v1"}})
        return preload_modules(cfg)

    assert "sandbatch.harness.mini_env:warm_up" in modules("host")
    assert not [m for m in modules("sandbox") if m.startswith("sandbatch.harness.mini_env")]


def test_host_mode_saves_the_trajectory_once_at_the_end(tmp_path):
    # mini would re-encode the whole history after every step; each command here looks for the file
    look = {"content": "Saved yet?", "tool_calls": [{"name": "bash", "arguments": {
        "command": f"test -e {tmp_path / 'mini.traj.json'} && echo saved || echo not-saved"}}]}
    script = {"tasks": {"watch the trajectory": [look] * 3}, "final": HOST_SCRIPT["tasks"]["fix it"][-1]}
    with scripted_model_server(script) as (url, _):
        outcome, _ = run_on_host(tmp_path, {}, url, prompt="watch the trajectory")
    assert outcome.metadata["exit_status"] == "Submitted"
    assert [o["output"].strip() for o in observations(outcome)] == ["not-saved"] * 3
    saved = json.loads((tmp_path / "mini.traj.json").read_text())
    assert saved["messages"] == outcome.events and saved["info"]["exit_status"] == "Submitted"


def test_an_agent_thread_that_fails_after_its_step_gave_up_logs_nothing(caplog):
    """A host-mode agent's thread can end with an exception after its step stopped awaiting it
    (the step's timeout, then the sandbox deleted under it). That exception is no one's to log:
    the log would come whenever the collector frees the future, in the middle of whatever code
    runs then, and 3.11 formats its traceback with the AST parser (tests/conftest.py)."""
    import gc
    import threading

    from sandbatch.harness.mini_swe_agent import _in_thread

    async def main():
        go = threading.Event()

        def agent():
            go.wait(30)
            raise RuntimeError("the sandbox went away under the agent")

        done = _in_thread(agent)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(done), 0.05)  # as the harness step waits
        go.set()
        while not done.done():  # the thread hands its exception over, and no one asks for it
            await asyncio.sleep(0.01)

    asyncio.run(main())
    gc.collect()
    assert "never retrieved" not in caplog.text, caplog.text
