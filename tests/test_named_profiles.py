"""Every named profile, as shipped, end to end on the real OpenSandbox server.

Each profile runs two tasks in its benchmark's real row format (SWE-bench 5.x rows with
their own eval_script, SWE-bench Pro rows with run_scripts/, Terminal-Bench task
directories), with the pool agent, and only the variables its header lists set: the
model URL and key point at the scripted model, the sandbox service's at the real server,
SANDBATCH_POOL_BINARY at the pool stand-in (tests/fixtures/pool_standin, which calls the
model through the rollout's proxy and runs the shell commands it answers with). The
command line overrides the task file and a task limit, nothing else. The images are built
here from sandbatch/base:bookworm under the names the profiles' image_rewrites produce,
so the rewrite is what finds them. The first task of each run gets the reference fix
from the model, the second a model that gives up: one resolved, one not.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from docker_fixtures import docker_base_image, docker_engine  # noqa: F401
from harness_support import scripted_model_server
from real_opensandbox import real_opensandbox  # noqa: F401
from suite import unique_run
from sandbatch import REPO_ROOT

pytestmark = pytest.mark.slow

SMOKE = REPO_ROOT / "data" / "smoke"
STANDIN = REPO_ROOT / "tests" / "fixtures" / "pool_standin"
PRO_FIX = REPO_ROOT / "tests" / "fixtures" / "bench" / "swe_pro" / "run_scripts" / "instance_greeter__greeter-0001"
MIRROR = "registry.example.com/mirror/"  # what the profiles rewrite public image names to
GIT = "git -c user.name=sandbatch -c user.email=sandbatch@localhost"
EVAL_START, EVAL_END = ">>>>> Start Test Output", ">>>>> End Test Output"

# profile -> the two smoke tasks it runs: the model fixes the first and gives up on the
# second (it tells tasks apart by their text, so no task is first in one profile and
# second in another)
PROFILES = {
    "lightning_swe_verified": ("smoke__calc-1", "smoke__textutils-1"),
    "xs_swe_verified": ("smoke__duration-1", "smoke__lrucache-1"),
    "xs_swe_multilingual": ("smoke__inventory-1", "smoke__textutils-1"),
    "xs_swe_pro": ("smoke__calc-1", "smoke__lrucache-1"),
    "xs_terminal_bench": ("hello-file", "goodbye-file"),
}
SERVED = "Qwen/Qwen3-32B"  # the model id the scripted model lists
TB_TASKS = {"hello-file": "Hello, world!", "goodbye-file": "Goodbye, world!"}


def smoke_rows() -> dict[str, dict]:
    rows = [json.loads(line) for line in (SMOKE / "tasks.jsonl").read_text().splitlines() if line.strip()]
    return {r["instance_id"]: r for r in rows}


def docker(*args: str, timeout: float = 300) -> str:
    res = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"docker {' '.join(args[:3])}: {res.stderr[-1500:]}"
    return res.stdout.strip()


def build(tag: str, context: Path, dockerfile: str) -> None:
    (context / "Dockerfile").write_text(dockerfile)
    docker("build", "-q", "-t", tag, str(context), timeout=600)


def head_of(tag: str, workdir: str) -> str:
    return docker("run", "--rm", "--entrypoint", "git", tag, "-C", workdir, "rev-parse", "HEAD")


def repo_image(base: str, tag: str, row: dict, workdir: str, tmp: Path, *, tests_tag: str | None = None) -> str:
    """An image holding the task's repository committed at `workdir`; returns the base commit.

    tests_tag: also commit the row's test patch and tag it (SWE-bench Pro images hold the
    graded tests at a later commit that before_repo_set_cmd checks them out from), then
    go back to the base commit.
    """
    ctx = tmp / tag.replace("/", "_").replace(":", "_")
    shutil.copytree(SMOKE / row["repo_dir"], ctx / "repo", ignore=shutil.ignore_patterns("__pycache__"))
    (ctx / "test.patch").write_text(row["test_patch"])
    steps = [f"cd {workdir}", "git init -q", "git add -A", f"{GIT} commit -qm base"]
    if tests_tag:
        steps += ["git apply /tmp/test.patch", "git add -A", f"{GIT} commit -qm tests", f"git tag {tests_tag}",
                  "git reset -q --hard HEAD~1"]
    build(tag, ctx, f"FROM {base}\nCOPY repo/ {workdir}/\nCOPY test.patch /tmp/test.patch\n"
                    f"RUN ln -sf /usr/bin/python3 /usr/local/bin/python && {' && '.join(steps)}\n")
    return head_of(tag, workdir)


def graded_files(row: dict) -> list[str]:
    from swebench.harness.utils import get_modified_files

    return get_modified_files(row["test_patch"])


def swebench_row(base: str, iid: str, tmp: Path, mirror: str = MIRROR) -> dict:
    """A SWE-bench row of the 5.x dataset shape: its own image, eval_script and log_parser."""
    src = smoke_rows()[iid]
    image = f"swebench/sweb.eval.x86_64.{iid.replace('__', '_1776_')}:latest".lower()
    commit = repo_image(base, mirror + image, src, "/testbed", tmp)
    reset = [f"git checkout {commit} -- {f} 2>/dev/null || rm -f {f}" for f in graded_files(src)]
    eval_script = "\n".join([
        "#!/bin/bash", "set -uxo pipefail", "cd /testbed", *reset,
        f"git apply -v - <<'EOF_114329324912'\n{src['test_patch']}\nEOF_114329324912",
        f": '{EVAL_START}'", src["test_cmd"], f": '{EVAL_END}'", *reset]) + "\n"
    keep = ("repo", "instance_id", "problem_statement", "hints_text", "patch", "test_patch", "FAIL_TO_PASS",
            "PASS_TO_PASS", "version", "created_at", "environment_setup_commit")
    return {**{k: src[k] for k in keep}, "base_commit": commit, "image": image, "eval_script": eval_script,
            "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail"}


def pro_row(base: str, iid: str, tmp: Path, out: Path, mirror: str = MIRROR) -> dict:
    """A SWE-bench Pro row (public dataset columns) with run_scripts/<instance_id>/ beside the file."""
    src = smoke_rows()[iid]
    pro_id = f"instance_{iid}"
    tag = f"{iid.replace('__', '.')}-pro"
    commit = repo_image(base, f"{mirror}jefzda/sweap-images:{tag}", src, "/app", tmp, tests_tag="graded-tests")
    files = graded_files(src)
    scripts = out / "run_scripts" / pro_id
    scripts.mkdir(parents=True)
    for name in ("run_script.sh", "parser.py"):
        shutil.copy(PRO_FIX / name, scripts / name)
    f2p, p2p = json.loads(src["FAIL_TO_PASS"]), json.loads(src["PASS_TO_PASS"])
    return {"repo": src["repo"], "instance_id": pro_id, "base_commit": commit, "patch": src["patch"],
            "test_patch": src["test_patch"], "problem_statement": src["problem_statement"],
            "requirements": "", "interface": "No new interfaces are introduced.", "repo_language": "python",
            "fail_to_pass": repr(f2p), "pass_to_pass": repr(p2p), "selected_test_files_to_run": repr(files),
            "before_repo_set_cmd": f"git reset --hard {commit}\ngit clean -fd\n"
                                   f"git checkout graded-tests -- {' '.join(files)}",
            "dockerhub_tag": tag}


def terminal_bench_task(base: str, name: str, out: Path, mirror: str = MIRROR) -> None:
    """A Terminal-Bench 2.x task directory (task.toml, instruction.md, tests/, solution/, environment/)."""
    image = f"alexgshaw/sandbatch-{name}:20251031"
    text = TB_TASKS[name]
    d = out / name
    for sub in ("tests", "solution", "environment"):
        (d / sub).mkdir(parents=True)
    (d / "instruction.md").write_text(f'Create a file called {name}.txt in /app that contains exactly "{text}" '
                                      "and a newline.\n")
    (d / "task.toml").write_text(
        'version = "1.0"\n\n[metadata]\nauthor_name = "sandbatch"\ndifficulty = "easy"\n'
        'category = "file-operations"\n\n[verifier]\ntimeout_sec = 120.0\n\n[agent]\ntimeout_sec = 300.0\n\n'
        f'[environment]\ndocker_image = "{image}"\ncpus = 1\nmemory_mb = 1024\nstorage_mb = 4096\n')
    (d / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\n"
        f'if [ "$(cat /app/{name}.txt 2>/dev/null)" = "{text}" ]; then echo 1; else echo 0; fi'
        " > /logs/verifier/reward.txt\n")
    (d / "solution" / "solve.sh").write_text(f"#!/bin/bash\necho '{text}' > /app/{name}.txt\n")
    (d / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\n")
    ctx = out.parent / f"ctx-{name}"
    ctx.mkdir()
    build(mirror + image, ctx, f"FROM {base}\nRUN mkdir -p /app /logs\nWORKDIR /app\n")


def write_tasks(profile: str, base: str, tmp: Path) -> Path:
    """The profile's task file (or directory) with its two tasks."""
    out = tmp / profile / "tasks"
    out.mkdir(parents=True)
    first, second = PROFILES[profile]
    if profile.endswith("terminal_bench"):
        for name in (first, second):
            terminal_bench_task(base, name, out)
        return out
    ctx = tmp / profile / "images"
    ctx.mkdir()
    rows = [pro_row(base, iid, ctx, out) if profile.endswith("pro") else swebench_row(base, iid, ctx)
            for iid in (first, second)]
    path = out / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def model_script() -> dict:
    """The first task of each profile gets its reference fix through a shell call; others give up."""
    rows = smoke_rows()
    tasks = {}
    for profile, (first, _) in PROFILES.items():
        if profile.endswith("terminal_bench"):
            key, cmd = f"{first}.txt", f"echo '{TB_TASKS[first]}' > /app/{first}.txt"
        else:
            key = rows[first]["problem_statement"].splitlines()[0]
            cmd = f"git apply - <<'EOF'\n{rows[first]['patch']}\nEOF"
        tasks[key] = [{"content": "Applying the fix.", "tool_calls": [{"name": "shell", "arguments": {"cmd": cmd}}]},
                      {"tool_calls": [{"name": "exit", "arguments": {}}]}]
    # the one model it serves: the profiles leave model.name to the endpoint
    return {"tasks": tasks, "default": [], "final": {"content": "I cannot finish this task."}, "models": [SERVED]}


def wait_all(procs: dict, timeout: float) -> dict[str, str]:
    """Wait for each (Popen, its open log file) of `procs` (killed past `timeout`); the log's
    tail of each that failed, by name."""
    failures = {}
    for name, (proc, log) in procs.items():
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        if proc.returncode != 0:
            failures[name] = Path(log.name).read_text()[-3000:]
    return failures


async def live_sandboxes(server, labels: dict[str, str]) -> list:
    from sandbatch.sandbox.opensandbox import OpenSandboxProvider

    provider = OpenSandboxProvider({"connection": {"domain": server.domain, "protocol": server.protocol,
                                                   "api_key_env": "SANDBATCH_TEST_PROFILE_KEY"}})
    try:
        found = await provider.list(labels)
        for info in found:  # leave nothing behind even when the assertion below fails
            await provider.delete(info.id)
        return found
    finally:
        await provider.aclose()


def test_every_named_profile_runs_end_to_end_as_shipped(tmp_path, monkeypatch, real_opensandbox,  # noqa: F811
                                                        docker_base_image):  # noqa: F811
    monkeypatch.setenv("SANDBATCH_TEST_PROFILE_KEY", real_opensandbox.key)  # this test's own look at the server
    owner = unique_run("t")  # the owner label: this test's sandboxes and no one else's
    with scripted_model_server(model_script()) as (url, model):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SANDBATCH_", "OPEN_SANDBOX_"))}
        env.update({
            "SANDBATCH_MODEL_URL": url, "SANDBATCH_MODEL_API_KEY": "upstream-key",
            "OPEN_SANDBOX_DOMAIN": real_opensandbox.url, "OPEN_SANDBOX_API_KEY": real_opensandbox.key,
            "SANDBATCH_POOL_BINARY": str(STANDIN), "LOGNAME": owner, "USER": owner,
        })
        procs = {}
        t0 = time.monotonic()
        for profile in PROFILES:
            tasks = write_tasks(profile, docker_base_image, tmp_path)
            workdir = tmp_path / profile / "run"
            workdir.mkdir()
            cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO_ROOT / "Snakefile"), "-d", str(workdir),
                   "--cores", "2", "--configfile", str(REPO_ROOT / "config" / f"{profile}.yaml"),
                   "--config", f"benchmark={json.dumps({'tasks': str(tasks), 'limit': 2})}",
                   # the test server has no egress sidecar (real_opensandbox.py)
                   f"sandbox={json.dumps({'opensandbox': {'network_policy': False}})}"]
            log = open(workdir.parent / "snakemake.log", "w")
            procs[profile] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir),
                              log)
        failures = wait_all(procs, timeout=1500)
        took = time.monotonic() - t0
    leftovers = asyncio.run(live_sandboxes(real_opensandbox, {"owner": owner}))
    assert not failures, failures
    assert leftovers == [], [s.id for s in leftovers]

    for profile, (first, second) in PROFILES.items():
        run = tmp_path / profile / "run" / "results" / profile
        rows = {r["instance_id"]: r for r in map(json.loads, (run / "rollouts.jsonl").read_text().splitlines())}
        ids = [iid if profile.endswith("terminal_bench") else
               (f"instance_{iid}" if profile.endswith("pro") else iid) for iid in (first, second)]
        assert set(rows) == set(ids), (profile, rows)
        fixed, gave_up = rows[ids[0]], rows[ids[1]]
        assert (fixed["status"], fixed["resolved"], fixed["reward"]) == ("ok", True, 1.0), (profile, fixed)
        assert (gave_up["status"], gave_up["resolved"]) == ("ok", False), (profile, gave_up)
        # the agent ran in the sandbox and talked to the model through the rollout's proxy
        calls = [json.loads(line) for p in run.glob("*/0/model_calls.jsonl") for line in p.read_text().splitlines()]
        assert len(calls) >= 3 and all(c["status"] == 200 for c in calls), (profile, calls[:3])
        responses = [json.loads(p.read_text()) for p in run.glob("*/0/response.json")]
        assert sum(1 for r in responses for i in r["output"] if i["type"] == "function_call") >= 2, profile
        preds = (run / "predictions.jsonl").read_text().splitlines()
        assert len(preds) == 2
        metrics = json.loads((run / "metrics.json").read_text())
        assert metrics["resolved_rate"]["value"] == 0.5, (profile, metrics["resolved_rate"])
        assert (run / "report.md").is_file()
        assert json.loads((run / "manifest.json").read_text())["config"]["model"]["name"] == SERVED
    # what reached the model: the one model the endpoint lists and the profile's sampling (the
    # proxy applied them) and the upstream key from the environment, never the per-rollout key the agent held
    chat = [r for r in model.requests if r["path"].endswith("/chat/completions")]
    assert len(chat) >= 3 * len(PROFILES)
    assert all(r["body"]["model"] == SERVED and r["body"]["temperature"] == 0.6 for r in chat)
    assert all(r["headers"].get("authorization") == "Bearer upstream-key" for r in chat)
    print(f"5 named profiles x 2 rollouts on the real OpenSandbox server: {took:.0f} s")
