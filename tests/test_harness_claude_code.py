"""The claude-code harness: its settings and environment, event conversion, status mapping,
and real Claude Code runs.

The end-to-end tests run the real CLI (npm `@anthropic-ai/claude-code` at the harness's
pinned version) through the real workflow against the scripted model, whose Chat
Completions the proxy serves to Claude Code as Anthropic's Messages API: installed by npm
inside a local sandbox, and baked into an image for a Docker sandbox (its package carries a
self-contained binary, so the image needs no Node).
"""

from __future__ import annotations

import functools
import json
import stat
import subprocess
from pathlib import Path

import pytest
from openai.types.responses import Response

from docker_fixtures import containers, docker_base_image, docker_engine, docker_run_label, npm_agent_image  # noqa: F401
from gym_env import assert_valid_responses
from harness_support import (CALC_EDIT, SLUG_EDIT, assert_token_data, convert_events, items_of, leftover_sandboxes,
                             listed_model, recorded_events, rollout, run_context, run_workflow, scripted_model_server,
                             smoke_config)
from real_opensandbox import real_opensandbox, reap_run  # noqa: F401 (fixture)
from suite import unique_run
from services import need_program
from sandbatch.core.errors import UserError
from sandbatch.harness import get_harness
from sandbatch.harness.claude_code import DEFAULT_DENY, result_failure
from sandbatch.rollout import responses

FIXTURES = Path(__file__).parent / "fixtures"
RECORDED = FIXTURES / "claude_code_2.1.332_events.jsonl"  # a real run: grep, a sed edit, a final message
CLAUDE_PREFIX = "/opt/claude-code"  # where claude_image holds Claude Code: bin/claude under it


convert = functools.partial(convert_events, "claude-code")


def recorded():
    return recorded_events(RECORDED)


def test_convert_a_recorded_run():
    conv = convert(recorded())
    shape = [(i["type"], i.get("call_id"), i.get("name")) for i in conv.items]
    assert shape == [("reasoning", None, None), ("message", None, None),
                     ("function_call", "call_0_0", "Bash"), ("function_call_output", "call_0_0", None),
                     ("message", None, None),
                     ("function_call", "call_1_0", "Bash"), ("function_call_output", "call_1_0", None),
                     ("message", None, None)]
    assert json.loads(conv.items[2]["arguments"]) == {"command": "grep -n 'def divide' -A 2 calc.py",
                                                      "description": "Show the code"}
    assert conv.items[3]["output"] == "1:def divide(a, b):\n2-    return a // b"
    assert conv.items[-1]["content"][0]["text"] == "divide() now returns the true quotient."
    assert conv.unknown == 0 and conv.metadata["system_events"] == {"thinking_tokens": 1}
    result = conv.metadata["claude_code_result"]
    assert (result["subtype"], result["is_error"], result["num_turns"]) == ("success", False, 3)
    assert conv.metadata["session_ids"] == [recorded()[0]["session_id"]]
    assert conv.metadata["claude_code"]["permissionMode"] == "bypassPermissions"
    # openai-python's own model takes the items (the end-to-end runs check NeMo Gym's too)
    Response.model_validate(responses.response(conv.items, responses.usage(100, 20), "m", "completed", {}))


def test_convert_errors_feedback_and_unknown_records():
    events = [
        {"type": "assistant", "message": {"content": [{"type": "tool_use", "id": "t1", "name": "Read",
                                                       "input": {"file_path": "/etc/x"}},
                                                      {"type": "server_tool_use", "id": "s1"}]}},
        {"type": "user", "message": {"content": [
            {"type": "tool_result", "tool_use_id": "t1", "is_error": True,
             "content": [{"type": "text", "text": "denied"}, {"type": "image", "source": {}}]},
            {"type": "text", "text": "[Request interrupted]"}]}},
        {"type": "assistant", "message": {"content": "plain text answer"}},
        {"type": "stream_event", "event": {}}, {"type": "sandbatch.text", "text": "warn"}, ["junk"],
    ]
    conv = convert(events)
    assert [(i["type"], i.get("output")) for i in conv.items] == [
        ("function_call", None), ("function_call_output", 'denied\n{"type": "image", "source": {}}'), ("message", None)]
    assert conv.metadata["failed_tool_results"] == 1
    assert conv.feedback == [{"after": conv.items[1]["id"], "text": "[Request interrupted]"}]
    assert conv.unknown == 4 and conv.metadata["unknown_types"] == {"server_tool_use": 1, "stream_event": 1,
                                                                    "sandbatch.text": 1, "list": 1}


def test_result_event_maps_to_status():
    assert result_failure({"type": "result", "subtype": "success", "is_error": False}) is None
    assert result_failure({"type": "result", "subtype": "success", "is_error": True}) == "agent_error_event"
    assert result_failure({"type": "result", "subtype": "error_during_execution"}) == "agent_error_event"
    assert result_failure({"type": "result", "subtype": "error_max_turns"}) == "turn_limit"
    assert result_failure(None) == "no_result"


def test_settings_and_environment(tmp_path):
    harness = get_harness("claude-code")
    ctx = run_context("claude-code", tmp_path, {"deny": [*DEFAULT_DENY, "Read(/etc/**)"],
                                                "settings": {"model": "x"}, "env": {"BASH_MAX_TIMEOUT_MS": 9}},
                      model_url="http://10.0.0.2:4000/v1", api_key="sbx-rollout-key", model_name="org/m-1")

    class Box:
        tmpdir = "/tmp/sbx"

    settings = harness.settings(ctx)
    assert settings["permissions"]["deny"][-1] == "Read(/etc/**)" and "WebFetch" in settings["permissions"]["deny"]
    assert "Bash(git log:*)" in settings["permissions"]["deny"] and settings["model"] == "x"
    env = harness.env(Box(), ctx)
    assert env["ANTHROPIC_BASE_URL"] == "http://10.0.0.2:4000"  # Claude Code adds /v1/messages
    assert env["ANTHROPIC_API_KEY"] == "sbx-rollout-key"
    assert env["ANTHROPIC_MODEL"] == env["ANTHROPIC_SMALL_FAST_MODEL"] == env["CLAUDE_CODE_SUBAGENT_MODEL"] == "org/m-1"
    assert env["HOME"] == "/tmp/sbx/home" and env["CLAUDE_CONFIG_DIR"] == "/tmp/sbx/home/.claude"
    assert env["DISABLE_TELEMETRY"] == env["DISABLE_AUTOUPDATER"] == env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["IS_SANDBOX"] == "1" and env["BASH_MAX_TIMEOUT_MS"] == "9"


def test_install_config_errors(tmp_path):
    harness = get_harness("claude-code")
    (tmp_path / "prefix").mkdir()
    for config, message in [({"install": {"method": "brew"}}, "install.method"),
                            ({"install": {"method": "upload"}}, "install.source"),
                            ({"install": {"method": "upload", "source": str(tmp_path / "prefix")}}, "no bin/claude"),
                            ({"install": {"method": "path"}}, "install.path"),
                            ({"deny": "WebFetch"}, "harness.config.deny"),
                            ({"max_turn": 3}, "unknown key 'max_turn'")]:
        with pytest.raises(UserError, match=message):
            harness.check_config(harness.options_of(config))


# --- a stand-in claude: crashes, errors and hangs -----------------------------------------------

def fake_claude(path: Path) -> Path:
    """A stand-in `claude` (answers --version): on the calc task it hangs after one event; on
    textutils it reports an API error in its result and exits 1; otherwise it says success
    in its result but exits 0 with is_error set."""
    path.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo '2.1.332 (Claude Code)'; exit 0; }\n"
                    "prompt=$(cat)\n"
                    "echo '{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s1\"}'\n"
                    "case \"$prompt\" in\n"
                    "  *divide*) exec sleep 300;;\n"
                    "  *slugify*) echo '{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":true,"
                    "\"result\":\"API Error: 500\"}'; exit 1;;\n"
                    "  *) echo '{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":true,"
                    "\"result\":\"API Error: Connection error.\"}'; exit 0;;\nesac\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.mark.slow
def test_crashing_failing_and_hanging_claude_are_mapped(tmp_path):
    harness = {"name": "claude-code", "config": {"install": {"method": "upload", "source": str(fake_claude(tmp_path / "c"))}}}
    tasks = ["smoke__calc-1", "smoke__textutils-1", "smoke__inventory-1"]
    with listed_model() as url:  # never called
        cfg = smoke_config(tmp_path, harness, tasks, model={"name": "m", "base_url": url}, timeouts={"agent": 4})
        run_dir, _ = run_workflow(tmp_path, cfg)
    got = {task: rollout(run_dir, task, "harness.json") for task in tasks}
    assert [(h["status"], h["failure_class"], h["exit_code"], h["timed_out"]) for h in got.values()] == [
        ("timeout", "agent_timeout", None, True), ("agent_error", "agent_exit", 1, False),
        ("agent_error", "agent_error_event", 0, False)]
    assert rollout(run_dir, "smoke__calc-1", "events.jsonl") == [{"type": "system", "subtype": "init", "session_id": "s1"}]
    assert all(rollout(run_dir, task, "grade.json")["reward"] == 0.0 for task in tasks)
    assert leftover_sandboxes(tmp_path) == []


# --- the real Claude Code through the workflow ------------------------------------------------

def fix_turns(check: str, edit: str) -> list[dict]:
    """Look, edit through Claude Code's Bash tool, then say it is done."""
    return [
        {"reasoning_content": "Find the code first.", "content": "Looking at the code.",
         "tool_calls": [{"name": "Bash", "arguments": {"command": check, "description": "Show the code"}}]},
        {"content": "Applying the fix.",
         "tool_calls": [{"name": "Bash", "arguments": {"command": edit, "description": "Edit the file"}}]},
    ]


# the anti-cheat deny-list holds with permissions skipped: reading history is refused
GIT_LOG = {"content": "What changed lately?", "tool_calls": [{"name": "Bash", "arguments": {
    "command": "git log --oneline", "description": "Read the history"}}]}
SCRIPT = {
    "tasks": {
        "divide() truncates": {"turns": [GIT_LOG, *fix_turns("grep -n 'def divide' -A 2 calc.py", CALC_EDIT)],
                               "final": {"content": "divide() now returns the true quotient."}},
        "slugify() leaves": {"turns": fix_turns("cat textutils/slug.py", SLUG_EDIT),
                             "final": {"content": "Slugs no longer have repeated or edge dashes."}},
    },
    "final": {"content": "Nothing to do."},
}


def assert_resolved(run_dir: Path, tasks: list[str], model) -> None:
    """Each rollout ran Claude Code to its fix: ok, the items it made, graded resolved, every
    model turn's token ids on its items; what reached the model was Chat Completions."""
    for task in tasks:
        h = rollout(run_dir, task, "harness.json")
        assert (h["status"], h["exit_code"]) == ("ok", 0), h
        resp = rollout(run_dir, task, "response.json")
        calls, outputs = items_of(resp, "function_call"), items_of(resp, "function_call_output")
        denied = task == "smoke__calc-1"
        assert [c["name"] for c in calls] == ["Bash"] * (2 + denied)
        assert [o["call_id"] for o in outputs] == [c["call_id"] for c in calls]
        if denied:
            assert "git log --oneline has been denied" in outputs[0]["output"], outputs[0]
            assert resp["sandbatch"]["failed_tool_results"] == 1
        assert items_of(resp, "reasoning")[0]["summary"][0]["text"] == "Find the code first."
        assert resp["sandbatch"]["claude_code_result"]["subtype"] == "success"
        assert resp["sandbatch"]["unknown_events"] == 0
        assert rollout(run_dir, task, "grade.json")["reward"] == 1.0
        patch = rollout(run_dir, task, "patch.json")
        assert not any("claude" in f or ".local" in f for f in patch["files"]), patch["files"]
        records = rollout(run_dir, task, "model_calls.jsonl")
        assert [r["endpoint"] for r in records if r.get("call")] == ["messages"] * (3 + denied)
    assert_valid_responses([rollout(run_dir, task, "response.json") for task in tasks])
    chat = [r for r in model.requests if r["path"].endswith("/chat/completions")]
    assert len(chat) == 3 * len(tasks) + ("smoke__calc-1" in tasks) and all(r["body"]["model"] == "scripted" for r in chat)
    assert all(r["body"]["messages"][0]["role"] == "system" and "Bash" in json.dumps(r["body"]["tools"])
               for r in chat)
    assert not any("WebFetch" in json.dumps(r["body"]["tools"]) for r in chat)  # disallowed: not offered
    assert_token_data(run_dir, tasks, model)


@pytest.fixture
def scripted_model():
    with scripted_model_server(SCRIPT) as served:
        yield served


@pytest.mark.slow
def test_real_claude_code_from_npm_resolves_smoke_tasks(tmp_path, tmp_path_factory, scripted_model):
    need_program("npm", "run scripts/services/node.sh (as root)")
    url, model = scripted_model
    npm_cache = tmp_path_factory.getbasetemp() / "npm-cache"  # shared by the sandboxes of this session
    harness = {"name": "claude-code", "config": {"install": {"method": "npm", "env": {"npm_config_cache": str(npm_cache)}}}}
    tasks = ["smoke__calc-1", "smoke__textutils-1"]
    cfg = smoke_config(tmp_path, harness, tasks, model={"name": "scripted", "base_url": url, "tokens": "on"},
                       timeouts={"agent": 300, "install": 600})
    run_dir, took = run_workflow(tmp_path, cfg)
    assert_resolved(run_dir, tasks, model)
    assert leftover_sandboxes(tmp_path) == []
    # the Messages calls are counted as model calls: the usage summed in rollouts.jsonl is
    # what the model reported, call for call
    rows = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert sum(r["usage"]["input_tokens"] for r in rows) == sum(u["prompt"] for u in model.reported_usage) > 0
    assert sum(r["usage"]["output_tokens"] for r in rows) == sum(u["completion"] for u in model.reported_usage)
    timings = {t: (rollout(run_dir, t, "harness.json")["install_s"], rollout(run_dir, t, "harness.json")["agent_s"])
               for t in tasks}
    print(f"\nclaude-code via npm, 2 tasks: workflow {took:.1f} s; (install s, agent s) per task: {timings}")


@pytest.fixture(scope="session")
def claude_image(docker_engine, docker_base_image) -> str:  # noqa: F811
    """The base image with Claude Code (npm, the harness's pinned version) under CLAUDE_PREFIX."""
    from sandbatch.harness.claude_code import ClaudeCodeHarness

    return npm_agent_image(docker_base_image, "claude", f"@anthropic-ai/claude-code@{ClaudeCodeHarness.default_version}",
                           CLAUDE_PREFIX)


@pytest.mark.slow
def test_real_claude_code_in_docker_resolves_a_smoke_task(tmp_path, docker_engine, docker_run_label,  # noqa: F811
                                                          claude_image, scripted_model):
    url, model = scripted_model
    harness = {"name": "claude-code", "config": {"install": {"method": "path", "path": f"{CLAUDE_PREFIX}/bin/claude"}}}
    cfg = smoke_config(tmp_path, harness, ["smoke__textutils-1"], run=docker_run_label,
                       model={"name": "scripted", "base_url": url, "tokens": "on"},
                       sandbox={"provider": "docker", "default_image": claude_image}, timeouts={"agent": 300})
    run_dir, took = run_workflow(tmp_path, cfg)
    assert_resolved(run_dir, ["smoke__textutils-1"], model)
    left = containers(docker_engine, run=docker_run_label)
    assert left == []
    print(f"\nclaude-code in Docker, 1 task: workflow {took:.1f} s")


@pytest.mark.slow
def test_real_claude_code_on_opensandbox_resolves_a_smoke_task(tmp_path, real_opensandbox, claude_image,
                                                               scripted_model):
    """The same on the real OpenSandbox server: Claude Code in its sandbox reaches the model only
    through the rollout's proxy on this host, at the address the run derives."""
    url, model = scripted_model
    run = unique_run("cc")
    harness = {"name": "claude-code", "config": {"install": {"method": "path", "path": f"{CLAUDE_PREFIX}/bin/claude"}}}
    try:
        cfg = smoke_config(tmp_path, harness, ["smoke__calc-1"], run=run,
                           model={"name": "scripted", "base_url": url, "tokens": "on"},
                           sandbox={"provider": "opensandbox", "default_image": claude_image,
                                    "opensandbox": real_opensandbox.options()}, timeouts={"agent": 300})
        run_dir, took = run_workflow(tmp_path, cfg)
    finally:
        left = reap_run(real_opensandbox, run)
    assert_resolved(run_dir, ["smoke__calc-1"], model)
    assert left == [], f"sandboxes left behind: {left}"
    print(f"\nclaude-code on OpenSandbox, 1 task: workflow {took:.1f} s")


# Claude Code compacting its context. Its auto-compact window has a floor of 100k tokens
# (CLAUDE_CODE_AUTO_COMPACT_WINDOW), but CLAUDE_CODE_MAX_CONTEXT_TOKENS declares the model's own
# window and CLAUDE_AUTOCOMPACT_PCT_OVERRIDE lowers the threshold to a share of it: 20% of
# 30,000. The first command prints ~3,500 tokens (the scripted model's toy tokenizer) over a
# ~4,200-token first prompt. Claude Code tries to compact after it (no model call: too little
# history to summarise) and again after the edit: it asks for an <analysis>/<summary> reply
# (rejected without the tags), then continues from the summary plus the turns it keeps.
CC_SUMMARY = ("<analysis>The task: divide() truncates.</analysis>\n"
              "<summary>calc.divide() used floor division; it now divides truly. Next: report it.</summary>")
CC_COMPACTING_SCRIPT = {
    "tasks": {"divide() truncates": [
        {"reasoning_content": "Find the code first.", "content": "Looking at the code.",
         "tool_calls": [{"name": "Bash", "arguments": {"command": "seq 1 3000; grep -n 'def divide' -A 2 calc.py",
                                                       "description": "Show the code"}}]},
        {"content": "Applying the fix.",
         "tool_calls": [{"name": "Bash", "arguments": {"command": CALC_EDIT, "description": "Edit the file"}}]},
    ]},
    "replies": {"create a detailed summary": {"content": CC_SUMMARY}},
    "final": {"content": "divide() now returns the true quotient."},
}


@pytest.mark.slow
def test_real_claude_code_compacting_its_context_starts_a_trusted_segment(tmp_path, docker_engine,  # noqa: F811
                                                                          docker_run_label, claude_image):
    from harness_support import assert_gym_training_items, assert_segments_chain

    harness = {"name": "claude-code", "config": {
        "install": {"method": "path", "path": f"{CLAUDE_PREFIX}/bin/claude"}, "max_output_tokens": 1000,
        "env": {"CLAUDE_CODE_MAX_CONTEXT_TOKENS": 30000, "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": 20}}}
    with scripted_model_server(CC_COMPACTING_SCRIPT) as (url, model):
        cfg = smoke_config(tmp_path, harness, ["smoke__calc-1"], run=docker_run_label,
                           model={"name": "scripted", "base_url": url, "tokens": "on"},
                           sandbox={"provider": "docker", "default_image": claude_image}, timeouts={"agent": 300})
        run_dir, took = run_workflow(tmp_path, cfg)
    h = rollout(run_dir, "smoke__calc-1", "harness.json")
    assert (h["status"], h["exit_code"]) == ("ok", 0), h
    assert rollout(run_dir, "smoke__calc-1", "grade.json")["reward"] == 1.0
    chat = [r["body"] for r in model.requests if r["path"].endswith("/chat/completions")]
    summaries = [b for b in chat if "create a detailed summary" in json.dumps(b["messages"][-1])]
    assert len(summaries) == 1, [json.dumps(b["messages"][-1])[:200] for b in chat]
    resp = rollout(run_dir, "smoke__calc-1", "response.json")
    assert resp["sandbatch"]["system_events"]["compact_boundary"] == 1, resp["sandbatch"]["system_events"]
    # the summary comes back to the model as a user message: feedback, not an assistant item
    assert "calc.divide() used floor division" in resp["sandbatch"]["feedback"][-1]["text"]
    join = resp["sandbatch"]["token_join"]
    # Claude Code does not stream its summary back: that call has no items (unmatched). Its prompt
    # does not extend the edit turn's though it keeps the history, but it produces nothing a
    # trainer takes (no drift); the turn after it starts a new, trusted segment
    assert (join["calls"], join["unmatched_calls"], join["segments"], join["rewritten_turns"],
            join["untrusted_turns"], join["drifted_turns"], join["unmatched_items"]) == (4, 1, 2, 1, 0, 0, 0), join
    carrying = [i for i in resp["output"] if "segment" in i]
    assert [(i["type"], i["segment"], i["trusted"]) for i in carrying] == [
        ("function_call", 0, True), ("function_call", 0, True), ("message", 1, True)], carrying
    assert carrying[-1]["content"][0]["text"] == "divide() now returns the true quotient."
    # every carried turn's ids and logprobs are the upstream reply's with exactly that prompt
    replies = {tuple(r.prompt_ids): r for r in (model.reply(b) for b in chat)}
    for item in carrying:
        generated = [i for _, i in replies[tuple(item["prompt_token_ids"])].generated()]
        assert item["generation_token_ids"] == generated
    after, before = carrying[-1]["prompt_token_ids"], carrying[1]["prompt_token_ids"]
    assert after[:len(before)] != before  # the new segment's prompt is the summary's conversation
    assert_segments_chain(carrying)
    assert_gym_training_items([resp])
    Response.model_validate({k: v for k, v in resp.items() if k != "sandbatch"})
    assert containers(docker_engine, run=docker_run_label) == []
    print(f"\nclaude-code compacting in Docker, 1 task: workflow {took:.1f} s; {len(chat)} model calls; {join}")


# --- a corpus row: a real SWE-bench task on its own image --------------------------------------

ROW = "psf__requests-5414"  # the smallest row's image; its gold patch is one line


def row_agent_image(row_image: str, agent_image: str) -> str:
    """The row's image with Claude Code copied from `agent_image` under CLAUDE_PREFIX (no npm,
    no network), built once on a machine (its tag names both images' ids)."""
    import hashlib
    import tempfile

    from shared import built_once

    ids = [subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", image], capture_output=True,
                          text=True, check=True).stdout.strip() for image in (row_image, agent_image)]
    tag = f"sandbatch/test-agent:claude-{ROW.lower()}-{hashlib.sha256(' '.join(ids).encode()).hexdigest()[:12]}"
    with built_once(f"agent-image-claude-{ROW}", bound=900):
        if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode != 0:
            with tempfile.TemporaryDirectory(prefix="sandbatch-agent-image-") as tmp:
                (Path(tmp) / "Dockerfile").write_text(f"FROM {agent_image} AS agent\nFROM {row_image}\n"
                                                      f"COPY --from=agent {CLAUDE_PREFIX}/ {CLAUDE_PREFIX}/\n")
                build = subprocess.run(["docker", "build", "-q", "-t", tag, tmp], capture_output=True, text=True,
                                       timeout=900)
            assert build.returncode == 0, f"docker build {tag}: {build.stderr[-1500:]}"
    return tag


@pytest.mark.slow
@pytest.mark.xdist_group("corpus")
def test_real_claude_code_in_docker_resolves_a_corpus_row(tmp_path, docker_engine, docker_base_image,  # noqa: F811
                                                          docker_run_label, claude_image):
    """Claude Code on a real SWE-bench row's image applies the row's gold patch through its Bash
    tool, and the real grader (the row's tests, every defence on) says resolved."""
    from sandbatch import corpus
    from sandbatch.corpus.build import build

    row = corpus.rows([ROW])[0]
    build(row)  # present on a machine that ran the corpus tests
    task = {**row.task(), "image": row_agent_image(row.image(), claude_image)}
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(task) + "\n")
    script = {"tasks": {"raises UnicodeError": {
        "turns": fix_turns("grep -n \"startswith(u'\\*')\" requests/models.py",
                           f"git apply <<'EOF'\n{row.data['patch']}EOF\ngit diff --stat"),
        "final": {"content": "A host starting with a dot now raises InvalidURL."}}}}
    harness = {"name": "claude-code", "config": {"install": {"method": "path", "path": f"{CLAUDE_PREFIX}/bin/claude"}}}
    with scripted_model_server(script) as (url, model):
        cfg = {"run": docker_run_label, "benchmark": {"kind": "swebench", "tasks": str(tasks)},
               "harness": harness, "sandbox": {"provider": "docker"}, "retries": 0,
               "model": {"name": "scripted", "base_url": url, "tokens": "on"}, "timeouts": {"agent": 300}}
        run_dir, took = run_workflow(tmp_path, cfg)
    h = rollout(run_dir, ROW, "harness.json")
    assert (h["status"], h["exit_code"]) == ("ok", 0), h
    resp = rollout(run_dir, ROW, "response.json")
    outputs = items_of(resp, "function_call_output")
    assert "startswith(u'*')" in outputs[0]["output"] and "1 file changed" in outputs[1]["output"], outputs
    grade = rollout(run_dir, ROW, "grade.json")
    assert (grade["resolved"], grade["reward"], grade.get("tampering") or []) == (True, 1.0, []), grade
    assert rollout(run_dir, ROW, "patch.json")["files"] == ["requests/models.py"]
    assert_valid_responses([resp])
    assert_token_data(run_dir, [ROW], model)
    left = containers(docker_engine, run=docker_run_label)
    assert left == []
    print(f"\nclaude-code on {ROW} in Docker: workflow {took:.1f} s, grade {grade.get('duration_s')} s")
