"""The codex harness: generated config, event conversion, status mapping, and real Codex runs.

The real Codex is npm's `@openai/codex` at the harness's pinned version, installed once on
this machine (`codex_npm`); its static binary is uploaded into each sandbox as a user's would be.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from docker_fixtures import docker_base_image, docker_engine  # noqa: F401 (fixtures)
from real_opensandbox import os_run, real_opensandbox  # noqa: F401 (fixtures)
from gym_env import assert_valid_responses
from harness_support import (CALC_EDIT, OPENCODE_SCRIPT, assert_gym_training_items, assert_segments_chain,
                             assert_token_data, codex_npm_prefix, convert_events, items_of, leftover_sandboxes, listed_model,
                             recorded_events, rollout, run_context, run_workflow, scripted_model_server, sleeper,
                             smoke_config)
from sandbatch.core.errors import UserError
from sandbatch.harness import get_harness
from sandbatch.harness.codex import CodexHarness, exec_policy

FIXTURES = Path(__file__).parent / "fixtures"
RECORDED = FIXTURES / "codex_0.171.0_events.jsonl"  # a real run on smoke__calc-1: a refused `git log`, then the fix

# Codex offers `exec_command` (its argument `cmd`) where the script says bash; on calc-1 the
# agent first asks for the history, which the exec policy refuses
GIT_LOG = {"content": "History first.", "tool_calls": [{"name": "bash", "arguments": {"command": "git log -3"}}]}
CALC = OPENCODE_SCRIPT["tasks"]["divide() truncates"]
CODEX_SCRIPT = {**OPENCODE_SCRIPT,
                "tasks": {**OPENCODE_SCRIPT["tasks"], "divide() truncates": {**CALC, "turns": [GIT_LOG, *CALC["turns"]]}},
                "fallbacks": {"bash": [{"name": "exec_command", "rename": {"command": "cmd"}}]}}


def convert(events):
    return convert_events("codex", events)


def recorded():
    return recorded_events(RECORDED)


@pytest.fixture(scope="session")
def codex_npm() -> Path:
    return codex_npm_prefix()


CODEX_IN_IMAGE = "/opt/codex/codex"


@pytest.fixture(scope="session")
def codex_image(codex_npm, docker_base_image) -> str:  # noqa: F811
    """The base image with Codex's binary at CODEX_IN_IMAGE (run with `install: {method: path}`),
    built once on a machine (its tag names the recipe)."""
    import hashlib
    import shutil
    import subprocess
    import tempfile

    from sandbatch.harness.codex import native_binary
    from shared import built_once

    version = CodexHarness.default_version
    dockerfile = f"FROM {docker_base_image}\nCOPY codex {CODEX_IN_IMAGE}\nRUN {CODEX_IN_IMAGE} --version\n"
    base_id = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", docker_base_image],
                             capture_output=True, text=True, check=True).stdout.strip()
    tag = f"sandbatch/test-agent:codex-{version}-{hashlib.sha256(f'{base_id}{dockerfile}'.encode()).hexdigest()[:12]}"
    with built_once(f"codex-image-{version}", bound=900):
        if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode != 0:
            with tempfile.TemporaryDirectory(prefix="sandbatch-codex-image-") as tmp:
                shutil.copy(native_binary(str(codex_npm)), Path(tmp) / "codex")
                (Path(tmp) / "Dockerfile").write_text(dockerfile)
                build = subprocess.run(["docker", "build", "-q", "-t", tag, tmp], capture_output=True, text=True,
                                       timeout=900)
            assert build.returncode == 0, f"docker build {tag}: {build.stderr[-1500:]}"
    return tag


# --- conversion, from a recorded run ---------------------------------------------------------

def test_convert_a_recorded_run():
    conv = convert(recorded())
    shape = [(i["type"], i.get("call_id"), i.get("name")) for i in conv.items]
    assert shape == [("message", None, None),
                     ("function_call", "call_0_0", "exec_command"), ("function_call_output", "call_0_0", None),
                     ("reasoning", None, None), ("message", None, None),
                     ("function_call", "call_1_0", "exec_command"), ("function_call_output", "call_1_0", None),
                     ("message", None, None),
                     ("function_call", "call_2_0", "exec_command"), ("function_call_output", "call_2_0", None),
                     ("message", None, None)]
    # the model's arguments as generated; the refusal of the exec policy as the model saw it
    assert json.loads(conv.items[1]["arguments"]) == {"cmd": "git log -3"}
    assert "rejected" in conv.items[2]["output"]
    assert json.loads(conv.items[5]["arguments"]) == {"cmd": "grep -n 'def divide' -A 2 calc.py",
                                                      "description": "Show the code"}
    assert "return a // b" in conv.items[6]["output"]
    assert conv.items[3]["summary"][0]["text"] == "Find the code first."
    assert conv.items[-1]["content"][0]["text"] == "divide() now returns the true quotient."
    assert conv.unknown == 0 and conv.metadata["codex_items_from"] == "session"
    assert conv.metadata["codex_usage"] == {"input_tokens": 20869, "cached_input_tokens": 0, "output_tokens": 143,
                                            "reasoning_output_tokens": 9, "turns": 1}
    assert conv.instructions.startswith("You are a coding agent running in the Codex CLI")
    assert [m["role"] for m in conv.input] == ["user", "user"]  # Codex's environment context, then the task
    assert "<environment_context>" in conv.input[0]["content"] and "divide() truncates" in conv.input[1]["content"]
    assert conv.metadata["session_ids"] == [recorded()[0]["thread_id"]]
    # both conversions (the session's, and the stream's below) as response.json holds them
    stream = convert([ev for ev in recorded() if "." in str(ev.get("type"))])
    assert_valid_responses([_response(conv), _response(stream)])


def test_convert_falls_back_to_the_stream_and_keeps_unknowns():
    stream = [ev for ev in recorded() if "." in str(ev.get("type"))]  # the --json stream alone
    conv = convert(stream + [{"type": "turn.failed", "error": {"message": "stream disconnected"}},
                             {"type": "item.completed", "item": {"id": "item_9", "type": "collab_call"}}, ["junk"]])
    # the stream has Codex's account of the commands it ran: the refused one is not among them
    assert [i["type"] for i in conv.items] == ["message", "reasoning", "message", "function_call",
                                               "function_call_output", "message", "function_call",
                                               "function_call_output", "message"]
    calls = items_of({"output": conv.items}, "function_call")
    outputs = items_of({"output": conv.items}, "function_call_output")
    assert [c["call_id"] for c in calls] == [o["call_id"] for o in outputs] == ["item_4", "item_6"]
    assert json.loads(calls[0]["arguments"]) == {"cmd": "/bin/bash -lc \"grep -n 'def divide' -A 2 calc.py\""}
    assert "return a // b" in outputs[0]["output"]
    assert conv.metadata["codex_items_from"] == "stream"
    assert conv.metadata["errors"] == [{"message": "stream disconnected"}]
    assert conv.unknown == 2 and conv.metadata["unknown_types"] == {"item.completed": 1, "list": 1}


def test_convert_marks_compactions_and_later_words_to_the_model():
    def item(payload):
        return {"type": "response_item", "payload": payload}

    def said(role, text):
        return item({"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]})

    conv = convert([said("developer", "Be brief."), said("user", "Fix it."),
                    item({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "On it."}]}),
                    {"type": "compacted", "payload": {"message": "summary"}}, said("user", "Summary: on it."),
                    item({"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin"}),
                    item({"type": "custom_tool_call_output", "call_id": "c1", "output": [{"type": "input_text",
                                                                                        "text": "Done!"}]}),
                    item({"type": "web_search_call"})])
    assert (conv.instructions, conv.input) == ("Be brief.", [{"role": "user", "content": "Fix it.", "type": "message"}])
    assert [(i["type"], i.get("name"), i.get("arguments") or i.get("output")) for i in conv.items[1:]] == [
        ("function_call", "apply_patch", "*** Begin"), ("function_call_output", None, "Done!")]
    assert conv.metadata["codex_compactions"] == [{"after": conv.items[0]["id"]}]
    assert conv.feedback == [{"after": conv.items[0]["id"], "text": "Summary: on it."}]
    assert conv.unknown == 1 and conv.metadata["unknown_types"] == {"response_item": 1}


def _response(conv):
    from sandbatch.rollout import responses

    return responses.response(conv.items, responses.usage(), "m", "completed", {}, 0, conv.instructions, conv.input)


# --- config ------------------------------------------------------------------------------------

def test_generated_config(tmp_path):
    harness = get_harness("codex")
    user = {"codex_config": {"model_providers": {"sandbatch": {"request_max_retries": 2}}}, "agents_md": False,
            "reasoning_effort": "high"}
    ctx = run_context("codex", tmp_path, user, model_name="org/m-1", api_key="sk-secret-9")
    cfg = tomllib.loads(__import__("tomli_w").dumps(harness.codex_config(ctx)))  # what config.toml holds
    assert cfg["model_providers"]["sandbatch"] == {"name": "sandbatch", "base_url": "http://127.0.0.1:1234/v1",
                                                   "env_key": "SANDBATCH_MODEL_API_KEY", "wire_api": "responses",
                                                   "request_max_retries": 2}
    assert (cfg["model"], cfg["model_provider"]) == ("org/m-1", "sandbatch")
    assert (cfg["approval_policy"], cfg["sandbox_mode"], cfg["web_search"]) == ("never", "danger-full-access",
                                                                               "disabled")
    assert cfg["project_doc_max_bytes"] == 0 and cfg["model_reasoning_effort"] == "high"
    assert cfg["check_for_update_on_startup"] is False and cfg["analytics"] == {"enabled": False}
    assert "sk-secret-9" not in json.dumps(cfg)  # the key is only in the agent's environment
    assert "project_doc_max_bytes" not in harness.codex_config(run_context("codex", tmp_path))  # AGENTS.md read
    assert 'prefix_rule(pattern=["git", "log"], decision="forbidden"' in exec_policy([["git", "log"]])


def test_config_errors(tmp_path):
    harness = get_harness("codex")
    (tmp_path / "prefix").mkdir()
    for config, message in [({"install": {"method": "yarn"}}, "install.method"),
                            ({"install": {"method": "upload"}}, "install.source"),
                            ({"install": {"method": "upload", "source": str(tmp_path / "prefix")}}, "no Codex binary"),
                            ({"install": {"method": "path"}}, "install.path"),
                            ({"wire_api": "messages"}, "wire_api"),
                            ({"forbidden_commands": ["git log"]}, "forbidden_commands"),
                            ({"approval": "never"}, "unknown key 'approval'")]:
        with pytest.raises(UserError, match=message):
            harness.check_config(harness.options_of(config))


# --- status mapping ------------------------------------------------------------------------------

def test_status_from_exit_code_and_events():
    from sandbatch.harness._process import AgentRun

    harness = get_harness("codex")
    failed = {"type": "turn.failed", "error": {"message": "stream disconnected before completion"}}
    done = {"type": "turn.completed", "usage": {}}
    for exit_code, timed_out, events, expected in [
            (0, False, [done], ("ok", None)),
            (0, False, [failed], ("agent_error", "agent_error_event")),  # exit 0 all the same
            (1, False, [failed], ("agent_error", "agent_exit")),
            (None, True, [], ("timeout", "agent_timeout"))]:
        outcome = harness.outcome(AgentRun(exit_code, "", "", timed_out, 1.0), events)
        assert (outcome.status, outcome.failure_class) == expected, (exit_code, events)


@pytest.mark.slow
def test_crashing_and_hanging_codex(tmp_path):
    """A Codex that exits 1 after a failed turn is an agent_error; one that hangs is stopped at
    the timeout; both uploaded as a user's own binary would be, neither leaves a sandbox."""
    crash = tmp_path / "crash-codex"
    crash.write_text("#!/bin/sh\n[ \"$1\" = --version ] && exit 0\n"
                     "echo '{\"type\":\"turn.failed\",\"error\":{\"message\":\"unexpected status 500\"}}'\nexit 1\n")
    crash.chmod(0o755)
    results = {}
    with listed_model() as url:
        for name, binary, agent in (("crash", crash, 60), ("hang", sleeper(tmp_path / "hang-codex"), 3)):
            harness = {"name": "codex", "config": {"install": {"method": "upload", "source": str(binary)}}}
            (tmp_path / name).mkdir()
            cfg = smoke_config(tmp_path / name, harness, ["smoke__calc-1"], model={"name": "m", "base_url": url},
                               timeouts={"agent": agent})
            run_dir, _ = run_workflow(tmp_path / name, cfg)
            results[name] = rollout(run_dir, "smoke__calc-1", "harness.json")
            assert rollout(run_dir, "smoke__calc-1", "grade.json")["reward"] == 0.0
            assert leftover_sandboxes(tmp_path / name) == []
    assert (results["crash"]["status"], results["crash"]["failure_class"], results["crash"]["exit_code"]) == \
        ("agent_error", "agent_exit", 1)
    hang = results["hang"]
    assert (hang["status"], hang["failure_class"], hang["timed_out"]) == ("timeout", "agent_timeout", True)
    assert 2.5 < hang["agent_s"] < 30


# --- real Codex through the workflow -------------------------------------------------------------

@pytest.mark.slow
def test_real_codex_in_docker_resolves_smoke_tasks(tmp_path, codex_npm, docker_base_image, monkeypatch):
    """npm's Codex uploaded into Docker containers (its launcher given: the static binary goes),
    driven by the scripted model through the proxy's Responses API to real fixes."""
    monkeypatch.setenv("SCRIPTED_UPSTREAM_KEY", "sk-upstream-secret-43")
    tasks = ["smoke__calc-1", "smoke__textutils-1"]
    harness = {"name": "codex", "config": {"install": {"method": "upload", "source": str(codex_npm / "bin" / "codex")}}}
    with scripted_model_server(CODEX_SCRIPT) as (url, model):
        cfg = smoke_config(tmp_path, harness, tasks, model={"name": "scripted", "base_url": url, "tokens": "on",
                                                            "api_key_env": "SCRIPTED_UPSTREAM_KEY"},
                           sandbox={"provider": "docker", "default_image": docker_base_image},
                           timeouts={"agent": 300, "install": 600})
        run_dir, took = run_workflow(tmp_path, cfg)
    timings = {}
    for task in tasks:
        h = rollout(run_dir, task, "harness.json")
        assert (h["status"], h["exit_code"]) == ("ok", 0), h
        timings[task] = (round(h["install_s"], 1), round(h["agent_s"], 1))
        resp = rollout(run_dir, task, "response.json")
        calls = items_of(resp, "function_call")
        assert [c["name"] for c in calls] == ["exec_command"] * (3 if task == "smoke__calc-1" else 2)
        assert [o["call_id"] for o in items_of(resp, "function_call_output")] == [c["call_id"] for c in calls]
        assert items_of(resp, "reasoning")[0]["summary"][0]["text"] == "Find the code first."
        if task == "smoke__calc-1":  # the exec policy refused the history; the model saw why
            assert json.loads(calls[0]["arguments"])["cmd"] == "git log -3"
            assert "rejected" in items_of(resp, "function_call_output")[0]["output"]
        assert resp["sandbatch"]["unknown_events"] == 0 and resp["sandbatch"]["codex_items_from"] == "session"
        assert rollout(run_dir, task, "grade.json")["reward"] == 1.0
        patch = rollout(run_dir, task, "patch.json")
        assert not any("codex" in f for f in patch["files"]), patch["files"]
    assert_valid_responses([rollout(run_dir, task, "response.json") for task in tasks])
    calls = [r for r in model.requests if r["path"].endswith("/responses")]
    assert calls and all(r["body"]["model"] == "scripted" for r in calls)
    assert all(r["headers"].get("authorization") == "Bearer sk-upstream-secret-43" for r in calls)
    assert not [r for r in model.requests if r["path"].endswith("/chat/completions")]
    assert_joined(run_dir, tasks, model)
    assert leftover_sandboxes(tmp_path) == []
    print(f"\ncodex uploaded into docker, 2 tasks: workflow {took:.1f} s; (install s, agent s): {timings}")


def assert_joined(run_dir, tasks, model, turns=3):
    """Every assistant item joined to the model call that produced it, and each trusted turn's
    last item carrying the prompt ids that call was sent with, id for id. A Responses answer
    carries logprobs for its message text only (vLLM's shape, the scripted model's too), so a
    turn that also reasons or calls a tool has its generation ids in part; the prompt of the
    turn after one that reasoned (its reasoning before the text) does not extend them: that
    turn is drift, left untrusted (its ids off)."""
    prompts = {tuple(model.reply(r["body"]).prompt_ids) for r in model.requests if r["path"].endswith("/responses")}
    for task in tasks:
        resp = rollout(run_dir, task, "response.json")
        join = resp["sandbatch"]["token_join"]
        assert join["unmatched_items"] == 0 and join["matched_items"] == join["items"] > 0, join
        assert join["matched_calls"] == join["calls"] >= turns, join
        assert join["turns_with_tokens"] + join["untrusted_turns"] == join["calls"], join
        assert join["untrusted_turns"] == join["drifted_turns"] and join["turns_with_tokens"] >= 1, join
        carrying = [i for i in resp["output"] if "prompt_token_ids" in i]
        assert len(carrying) == join["turns_with_tokens"] and all(tuple(i["prompt_token_ids"]) in prompts
                                                                  for i in carrying)
        assert all(i["trusted"] for i in carrying) and carrying[0]["segment"] == 0


@pytest.mark.slow
def test_real_codex_on_opensandbox_resolves_a_smoke_task(tmp_path, real_opensandbox, os_run, codex_image):  # noqa: F811
    """Codex already in the image (`install: path`), in a sandbox of the real OpenSandbox
    server, reaching the scripted model only through the rollout's proxy: the task resolves."""
    from workflow_util import snakemake, write_config

    harness = {"name": "codex", "config": {"install": {"method": "path", "path": CODEX_IN_IMAGE}}}
    with scripted_model_server(CODEX_SCRIPT) as (url, model):
        cfg = write_config(tmp_path, "config.yaml", {
            "run": os_run, "retries": 0, "harness": harness, "timeouts": {"agent": 300},
            "benchmark": {"instance_ids": ["smoke__textutils-1"]}, "model": {"name": "scripted", "base_url": url},
            "sandbox": {"provider": "opensandbox", "default_image": codex_image,
                        "opensandbox": real_opensandbox.options()}})
        proc = snakemake(tmp_path, "--configfile", str(cfg), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "results" / os_run
    h = rollout(run_dir, "smoke__textutils-1", "harness.json")
    assert (h["status"], h["exit_code"]) == ("ok", 0), h
    assert rollout(run_dir, "smoke__textutils-1", "grade.json")["reward"] == 1.0
    resp = rollout(run_dir, "smoke__textutils-1", "response.json")
    assert [c["name"] for c in items_of(resp, "function_call")] == ["exec_command", "exec_command"]
    assert len([r for r in model.requests if r["path"].endswith("/responses")]) == 3


@pytest.mark.slow
def test_real_codex_through_translated_responses_keeps_every_turn_trusted(tmp_path, codex_npm):
    """With `model.proxy.responses: translate` Codex's Responses calls go upstream as Chat
    calls, whose answers carry the ids of the whole generation: the turn after one that
    reasoned and called a tool extends it, so every turn is trusted and carries its ids."""
    import subprocess

    cache = subprocess.run(["npm", "config", "get", "cache"], capture_output=True, text=True, check=True).stdout.strip()
    install = {"method": "npm", "env": {"npm_config_cache": cache, "npm_config_prefer_offline": "true"}}
    with scripted_model_server(CODEX_SCRIPT) as (url, model):
        cfg = smoke_config(tmp_path, {"name": "codex", "config": {"install": install}}, ["smoke__calc-1"],
                           model={"name": "scripted", "base_url": url, "tokens": "on",
                                  "proxy": {"responses": "translate"}}, timeouts={"agent": 120})
        run_dir, took = run_workflow(tmp_path, cfg)
    h = rollout(run_dir, "smoke__calc-1", "harness.json")
    assert (h["status"], h["exit_code"]) == ("ok", 0), h
    assert rollout(run_dir, "smoke__calc-1", "grade.json")["reward"] == 1.0
    paths = [r["path"] for r in model.requests if r["method"] == "POST"]
    assert paths and set(paths) == {"/v1/chat/completions"}, paths
    resp = rollout(run_dir, "smoke__calc-1", "response.json")
    reasoned = items_of(resp, "reasoning")
    assert reasoned and reasoned[0]["summary"][0]["text"] == "Find the code first."
    join = resp["sandbatch"]["token_join"]
    assert (join["segments"], join["drifted_turns"], join["untrusted_turns"]) == (1, 0, 0), join
    assert join["turns_with_tokens"] == join["calls"] == len(paths) == 4, join
    assert_token_data(run_dir, ["smoke__calc-1"], model)  # ids whole: reasoning, text and calls
    assert_valid_responses([resp])
    print(f"\ncodex through translated Responses, 1 task: workflow {took:.1f} s; token_join {join}")


# --- a corpus row: a real SWE-bench repository, graded by the real grader ------------------------

CORPUS_ROW = "psf__requests-5414"


@pytest.mark.slow
@pytest.mark.xdist_group("corpus")
def test_real_codex_fixes_a_corpus_row_graded_resolved(tmp_path, codex_npm, docker_engine,  # noqa: F811
                                                       docker_base_image):  # noqa: F811
    """npm's Codex in a Docker sandbox on the row's own image, the scripted model applying the
    row's gold patch through Codex's shell tool: SWE-bench's grader (its FAIL_TO_PASS and
    PASS_TO_PASS lists, every defence on) finds it resolved, and every turn's ids are joined."""
    from sandbatch import corpus
    from sandbatch.corpus.build import build

    row = corpus.rows([CORPUS_ROW])[0]
    build(row)  # present on a machine that ran the corpus tests; built otherwise
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(row.task()) + "\n")
    apply = f"git apply <<'EOF'\n{row.data['patch']}EOF\ngit diff --stat"
    script = {"tasks": {"http://.example.com raises UnicodeError": {
        "turns": [{"reasoning_content": "The label check misses a leading dot.", "content": "Applying the fix.",
                   "tool_calls": [{"name": "bash", "arguments": {"command": apply}}]}],
        "final": {"content": "A host starting with a dot is now an InvalidURL."}}},
        "fallbacks": CODEX_SCRIPT["fallbacks"]}
    harness = {"name": "codex", "config": {"install": {"method": "upload", "source": str(codex_npm / "bin" / "codex")}}}
    with scripted_model_server(script) as (url, model):
        cfg = {"run": "t", "retries": 0, "harness": harness, "timeouts": {"agent": 300},
               "benchmark": {"kind": "swebench", "tasks": str(tasks)},
               "model": {"name": "scripted", "base_url": url, "tokens": "on"}, "sandbox": {"provider": "docker"}}
        run_dir, took = run_workflow(tmp_path, cfg)
    h = rollout(run_dir, CORPUS_ROW, "harness.json")
    assert (h["status"], h["exit_code"]) == ("ok", 0), h
    grade = rollout(run_dir, CORPUS_ROW, "grade.json")
    assert (grade["resolved"], grade["reward"], grade.get("tampering") or []) == (True, 1.0, []), grade
    resp = rollout(run_dir, CORPUS_ROW, "response.json")
    calls = items_of(resp, "function_call")
    assert [json.loads(c["arguments"])["cmd"] for c in calls] == [apply]
    assert "requests/models.py" in items_of(resp, "function_call_output")[0]["output"]  # git diff --stat
    assert rollout(run_dir, CORPUS_ROW, "patch.json")["files"] == ["requests/models.py"]
    assert_valid_responses([resp])
    assert_joined(run_dir, [CORPUS_ROW], model, turns=2)
    print(f"\ncodex on {CORPUS_ROW}: workflow {took:.1f} s; install {h['install_s']:.1f} s, "
          f"agent {h['agent_s']:.1f} s, grade {grade.get('duration_s')} s")


# --- compaction ----------------------------------------------------------------------------------

# Codex compacting its context: its first prompt is ~5,150 tokens of the scripted model's toy
# tokenizer (instructions, tools, environment, task); the first command fixes the code and
# prints ~2,200 tokens more, which Codex counts against `model_auto_compact_token_limit`
# before its next request. So it asks for a summary (the history and its own prompt
# "... CONTEXT CHECKPOINT COMPACTION ..." as the last user message), then goes on from its
# initial context, the user's messages and the summary (a user message "Another language
# model started to solve this problem ..."): the turn after it is answered from `replies` too.
CODEX_SUMMARY = "calc.divide() used floor division; it now divides truly."
COMPACTING_SCRIPT = {
    "tasks": {"divide() truncates": [
        {"content": "Applying the fix.",  # no reasoning: the summary request's prompt extends this turn's ids
         "tool_calls": [{"name": "bash", "arguments": {"command": f"{CALC_EDIT}\nseq 1 2000"}}]}]},
    "replies": {"CONTEXT CHECKPOINT COMPACTION": {"content": CODEX_SUMMARY},
                "Another language model started": {"content": "divide() now returns the true quotient."}},
    "fallbacks": CODEX_SCRIPT["fallbacks"],
}


@pytest.mark.slow
def test_real_codex_compacting_its_context_starts_a_trusted_segment(tmp_path, codex_npm):
    """The real Codex, installed by the harness with npm (local provider; install.env points
    npm at this machine's cache, which `codex_npm` filled), compacts its history: the summary
    request continues the task's segment, the turn after the compaction starts a new one,
    every turn trusted, its ids the upstream's, each segment a chain."""
    import subprocess

    cache = subprocess.run(["npm", "config", "get", "cache"], capture_output=True, text=True, check=True).stdout.strip()
    install = {"method": "npm", "env": {"npm_config_cache": cache, "npm_config_prefer_offline": "true"}}
    harness = {"name": "codex", "config": {"install": install,
                                           "codex_config": {"model_auto_compact_token_limit": 6500}}}
    with scripted_model_server(COMPACTING_SCRIPT) as (url, model):
        cfg = smoke_config(tmp_path, harness, ["smoke__calc-1"], model={"name": "scripted", "base_url": url,
                                                                        "tokens": "on"},
                           timeouts={"agent": 120})
        run_dir, took = run_workflow(tmp_path, cfg)
    h = rollout(run_dir, "smoke__calc-1", "harness.json")
    assert (h["status"], h["exit_code"]) == ("ok", 0), h
    assert rollout(run_dir, "smoke__calc-1", "grade.json")["reward"] == 1.0
    assert h["version"] == CodexHarness.default_version, h  # pinned by default
    bodies = [r["body"] for r in model.requests if r["path"].endswith("/responses")]
    asked = [b for b in bodies if "CONTEXT CHECKPOINT COMPACTION" in json.dumps(b["input"][-1])]
    assert len(bodies) == 3 and len(asked) == 1, [json.dumps(b["input"][-1])[:200] for b in bodies]
    resp = rollout(run_dir, "smoke__calc-1", "response.json")
    summary, final = resp["output"][-2:]
    assert [i["content"][0]["text"] for i in (summary, final)] == [CODEX_SUMMARY,
                                                                   "divide() now returns the true quotient."]
    assert resp["sandbatch"]["codex_compactions"] == [{"after": summary["id"]}]
    join = resp["sandbatch"]["token_join"]
    assert (join["segments"], join["rewritten_turns"], join["drifted_turns"], join["untrusted_turns"]) == \
        (2, 1, 0, 0), join
    edit = items_of(resp, "function_call")[0]
    assert [(i["segment"], i["trusted"]) for i in (edit, summary, final)] == [(0, True), (0, True), (1, True)]
    assert_segments_chain([edit, summary, final])
    # the new segment's prompt is the compacted history, not the old one extended
    assert final["prompt_token_ids"][:len(edit["prompt_token_ids"])] != edit["prompt_token_ids"]
    replies = {tuple(model.reply(b).prompt_ids): model.reply(b) for b in bodies}
    for item in (edit, summary, final):  # each turn carries the ids of its upstream reply's message text
        reply = replies[tuple(item["prompt_token_ids"])]
        text = [i for name, tokens in reply.generation() if name == "content" for _, i in tokens]
        assert text and item["generation_token_ids"] == text, [name for name, _ in reply.generation()]
    assert_valid_responses([resp])
    assert_gym_training_items([resp])
    assert leftover_sandboxes(tmp_path) == []
    print(f"\ncodex compacting, 1 task: workflow {took:.1f} s (npm install {h['install_s']:.1f} s); "
          f"{len(bodies)} model calls; token_join {join}")
