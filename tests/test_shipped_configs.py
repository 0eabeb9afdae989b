"""The shipped configs that run an open harness on Docker (config/mini_*.yaml,
config/opencode_*.yaml, config/claude_code_docker.yaml and config/codex_docker.yaml), each run
exactly as shipped: no --config at all, the task file where the config names it (relative: the
working directory is looked in first), only the variables its header lists set, the model URL
pointing at the scripted model, and for OpenCode and Claude Code their binaries where their
installers put them (~/.opencode/bin/opencode, ~/.local/bin/claude; the real ones, from npm),
for Codex npm's package where the config's header installs it (~/.npm-global).

One short run per config, in parallel: one task in its benchmark's real row format
(SWE-bench 5.x rows with their own eval_script, SWE-bench Pro rows with run_scripts/,
Terminal-Bench task directories; tests/test_named_profiles.py builds them), its image
built here from sandbatch/base:bookworm under the public name the row names, so nothing
is pulled. The model applies the reference fix in one shell call and submits (mini: its
submit command; OpenCode and Claude Code: a final message); the task comes out resolved only if that fix
reached the container and the grader saw it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from docker_fixtures import containers, docker_base_image, docker_engine  # noqa: F401 (fixtures)
from harness_support import codex_npm_prefix, scripted_model_server
from services import need_program
from sandbatch.core import resources
from sandbatch.core.instance import read_instance
from test_named_profiles import SERVED, TB_TASKS, pro_row, smoke_rows, swebench_row, terminal_bench_task, wait_all

pytestmark = pytest.mark.slow

# config -> the task it runs (a smoke task in the benchmark's format, or a Terminal-Bench task)
CONFIGS = {
    "mini_swe_verified": "smoke__calc-1",
    "mini_swe_multilingual": "smoke__duration-1",
    "mini_swe_pro": "smoke__lrucache-1",
    "mini_terminal_bench": "hello-file",
    "opencode_swe_verified": "smoke__textutils-1",
    "opencode_swe_multilingual": "smoke__inventory-1",
    "opencode_swe_pro": "smoke__calc-1",
    "opencode_terminal_bench": "goodbye-file",
    "claude_code_docker": "smoke__calc-1",
    "codex_docker": "smoke__calc-1",
}
SUBMIT = {"content": "Done.", "tool_calls": [{"name": "bash", "arguments": {
    "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}]}


def write_tasks(name: str, task: str, base: str, workdir: Path) -> None:
    """The config's one task, where the config's benchmark.tasks points, relative to `workdir`."""
    from sandbatch.core.config import read_yaml

    where = workdir / read_yaml(resources.config_file(name))["benchmark"]["tasks"]
    if name.endswith("terminal_bench"):
        where.mkdir(parents=True)
        terminal_bench_task(base, task, where, mirror="")
        return
    where.parent.mkdir(parents=True)
    ctx = workdir.parent / "images"
    ctx.mkdir()
    row = (pro_row(base, task, ctx, where.parent, mirror="") if name.endswith("pro")
           else swebench_row(base, task, ctx, mirror=""))
    where.write_text(json.dumps(row) + "\n")


def model_script(harness: str) -> dict:
    """Each task's reference fix in one call of the harness's bash tool, then mini's submit
    command, or OpenCode's final message."""
    rows, tasks = smoke_rows(), {}
    for name, task in CONFIGS.items():
        if not name.startswith(harness):
            continue
        if task in TB_TASKS:
            key, cmd = f"{task}.txt", f"echo '{TB_TASKS[task]}' > /app/{task}.txt"
        else:
            key = rows[task]["problem_statement"].splitlines()[0]
            cmd = f"git apply - <<'EOF'\n{rows[task]['patch']}\nEOF"
        tasks[key] = [{"content": "Applying the fix.", "tool_calls": [{"name": "bash", "arguments": {
            "command": cmd, "description": "Apply the fix"}}]}]
    final = SUBMIT if harness == "mini" else {"content": "Done."}
    # Claude Code's shell tool is `Bash`; Codex's is exec_command, its argument cmd
    fallbacks = {"bash": ["Bash", {"name": "exec_command", "rename": {"command": "cmd"}}]}
    return {"tasks": tasks, "final": final, "models": [SERVED], "fallbacks": fallbacks}


@pytest.fixture(scope="module")
def agent_home(tmp_path_factory) -> Path:
    """A HOME holding the real OpenCode, Claude Code and Codex (npm's opencode-ai,
    @anthropic-ai/claude-code and @openai/codex, the harnesses' default versions) where their
    installers put them."""
    need_program("npm", "run scripts/services/node.sh (as root)")
    from sandbatch.harness.claude_code import ClaudeCodeHarness
    from sandbatch.harness.opencode import OpenCodeHarness

    home = tmp_path_factory.mktemp("home")
    for spec, platform_binary, where in (
            (f"opencode-ai@{OpenCodeHarness.default_version}", "opencode-linux-x64/bin/opencode", ".opencode/bin/opencode"),
            (f"@anthropic-ai/claude-code@{ClaudeCodeHarness.default_version}", "claude-code-linux-x64/claude",
             ".local/bin/claude")):
        prefix = tmp_path_factory.mktemp("agent-npm")
        res = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix), spec],
                             capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        [binary] = prefix.glob(f"node_modules/**/{platform_binary}")
        (home / where).parent.mkdir(parents=True)
        (home / where).symlink_to(binary)
    (home / ".npm-global").symlink_to(codex_npm_prefix())  # where codex_docker's header has npm install it
    return home


def test_every_open_harness_config_runs_as_shipped(tmp_path, docker_engine, docker_base_image,  # noqa: F811
                                                   agent_home):
    with scripted_model_server(model_script("mini")) as (mini_url, mini_model), \
            scripted_model_server(model_script("opencode")) as (opencode_url, opencode_model), \
            scripted_model_server(model_script("claude_code")) as (claude_url, claude_model), \
            scripted_model_server(model_script("codex")) as (codex_url, codex_model):
        base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SANDBATCH_"))}
        procs = {}
        t0 = time.monotonic()
        for name, task in CONFIGS.items():
            env = {**base, "SANDBATCH_MODEL_URL": mini_url, "SANDBATCH_MODEL_NAME": SERVED}
            if name.startswith("opencode"):
                env.update(SANDBATCH_MODEL_URL=opencode_url, HOME=str(agent_home))
            if name.startswith("claude_code"):
                env.update(SANDBATCH_MODEL_URL=claude_url, HOME=str(agent_home))
            if name.startswith("codex"):
                env.update(SANDBATCH_MODEL_URL=codex_url, HOME=str(agent_home))
            workdir = tmp_path / name / "run"
            workdir.mkdir(parents=True)
            write_tasks(name, task, docker_base_image, workdir)
            cmd = [sys.executable, "-m", "snakemake", "-s", str(resources.snakefile()), "--cores", "2",
                   "--configfile", str(resources.config_file(name))]
            log = open(workdir.parent / "snakemake.log", "w")
            procs[name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir), log)
        failures = wait_all(procs, timeout=1200)
        took = time.monotonic() - t0
    assert not failures, failures
    # each run instance's containers only: the shipped configs' run names are every suite's (and user's)
    leftovers = {name: containers(docker_engine, run=name,
                                  instance=read_instance(tmp_path / name / "run" / "results" / name))
                 for name in CONFIGS}
    assert not any(leftovers.values()), leftovers

    for name, task in CONFIGS.items():
        run = tmp_path / name / "run" / "results" / name
        [row] = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
        assert row["instance_id"] == (f"instance_{task}" if name.endswith("pro") else task), row
        assert (row["status"], row["resolved"], row["reward"]) == ("ok", True, 1.0), (name, row)
        harness = json.loads(next(run.glob("*/0/harness.json")).read_text())
        if name.startswith("mini"):
            assert harness["metadata"]["exit_status"] == "Submitted", (name, harness)
        else:
            assert (harness["status"], harness["exit_code"]) == ("ok", 0), (name, harness)
        calls = [json.loads(line) for line in next(run.glob("*/0/model_calls.jsonl")).read_text().splitlines()]
        assert len(calls) >= 2 and all(c["status"] == 200 for c in calls), (name, calls)
        assert json.loads((run / "manifest.json").read_text())["config"]["model"]["name"] == SERVED
        assert (run / "report.md").is_file()
    for harness, model in (("mini", mini_model), ("opencode", opencode_model),  # >= 2 calls a rollout
                           ("claude_code", claude_model), ("codex", codex_model)):
        # Codex asks the Responses API
        chat = [r for r in model.requests if r["path"].endswith(("/chat/completions", "/responses"))]
        assert len(chat) >= 2 * sum(n.startswith(harness) for n in CONFIGS), (harness, len(chat))
        assert all(r["body"]["model"] == SERVED for r in chat), harness
    print(f"{len(CONFIGS)} shipped open-harness configs x 1 rollout on Docker: {took:.0f} s")
