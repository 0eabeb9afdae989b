"""Synthetic benchmark files and a bare Snakefile, shared by the scale benchmarks.

Tasks look like SWE-bench rows in size (problem statement, gold and test patches, ~50
PASS_TO_PASS tests); the bare Snakefile has the same rules, wildcards, inputs and outputs
as the real workflow, `shell: "true"` bodies and a task list read from a plain id file:
the floor that sandbatch's own parse path is compared against.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

STEPS = ("sandbox", "harness", "convert", "patch", "grade")


def write_tasks(path: Path, n: int, seed: int = 0) -> Path:
    rnd = random.Random(seed)
    words = "the of a to in value error when returns none list dict parser config should fails test".split()
    text = lambda k: " ".join(rnd.choice(words) for _ in range(k))  # noqa: E731
    with open(path, "w") as fh:
        for i in range(n):
            repo = f"org{i % 12}/proj{i % 12}"
            iid = f"org{i % 12}__proj{i % 12}-{1000 + i}"
            diff = "".join(f"+{text(8)}\n" for _ in range(30))
            row = {
                "instance_id": iid, "repo": repo, "base_commit": f"{rnd.getrandbits(160):040x}",
                "problem_statement": text(250), "hints_text": text(40),
                "patch": f"diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,1 +1,30 @@\n{diff}",
                "test_patch": f"diff --git a/t.py b/t.py\n--- a/t.py\n+++ b/t.py\n@@ -1,1 +1,30 @@\n{diff}",
                "FAIL_TO_PASS": json.dumps([f"tests/test_m.py::test_fix_{j}" for j in range(3)]),
                "PASS_TO_PASS": json.dumps([f"tests/test_m.py::test_keep_{j}" for j in range(50)]),
                "version": "1.0", "created_at": "2024-01-01T00:00:00Z", "environment_setup_commit": None,
            }
            fh.write(json.dumps(row) + "\n")
    return path


BARE = '''
configfile: "{cfg}"
IDS = [line.split()[0] for line in open(config["ids"]) if line.strip()]
RUN_DIR = "results/" + config["run"]
ROLLOUT = RUN_DIR + "/{{task}}/{{repeat}}"
SETTINGS = RUN_DIR + "/_settings"

wildcard_constraints:
    task=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    repeat=r"\\d+",

def rollout_files(name):
    return [f"{{RUN_DIR}}/{{t}}/{{r}}/{{name}}" for t in IDS for r in range(config["repeats"])]

rule all:
    input: [RUN_DIR + "/rollouts.jsonl"] + rollout_files("grade.json") + rollout_files("response.json")

rule settings:
    output: SETTINGS + "/{{stage}}.json"
    wildcard_constraints: stage="agent|grade|aggregate"
    shell: "true"

rule sandbox:
    input: stamp=SETTINGS + "/agent.json"
    output: ROLLOUT + "/sandbox.json"
    log: ROLLOUT + "/logs/sandbox.log"
    shell: "true"

rule harness:
    input: sandbox=ROLLOUT + "/sandbox.json"
    output: events=ROLLOUT + "/events.jsonl", harness=ROLLOUT + "/harness.json", calls=ROLLOUT + "/model_calls.jsonl"
    log: ROLLOUT + "/logs/harness.log"
    shell: "true"

rule convert:
    input: events=ROLLOUT + "/events.jsonl", harness=ROLLOUT + "/harness.json", calls=ROLLOUT + "/model_calls.jsonl"
    output: ROLLOUT + "/response.json"
    log: ROLLOUT + "/logs/convert.log"
    shell: "true"

rule patch:
    input: sandbox=ancient(ROLLOUT + "/sandbox.json"), harness=ROLLOUT + "/harness.json"
    output: patch=ROLLOUT + "/patch.diff", info=ROLLOUT + "/patch.json"
    log: ROLLOUT + "/logs/patch.log"
    shell: "true"

rule grade:
    input: stamp=SETTINGS + "/grade.json", patch=ROLLOUT + "/patch.diff", info=ROLLOUT + "/patch.json"
    output: ROLLOUT + "/grade.json"
    log: ROLLOUT + "/logs/grade.log"
    shell: "true"

rule aggregate:
    input: stamp=SETTINGS + "/aggregate.json", grades=rollout_files("grade.json"), responses=rollout_files("response.json")
    output: RUN_DIR + "/rollouts.jsonl"
    shell: "true"
'''


def write_bare(d: Path, tasks: Path, repeats: int, run: str) -> Path:
    """A bare Snakefile (and its config and id list) beside `tasks`; returns the Snakefile."""
    from sandbatch.core.ids import path_id

    ids = d / "ids.txt"
    ids.write_text("".join(path_id(json.loads(l)["instance_id"]) + "\n" for l in open(tasks) if l.strip()))
    cfg = d / "bare.yaml"
    cfg.write_text(json.dumps({"ids": str(ids), "repeats": repeats, "run": run}))
    snakefile = d / "Snakefile.bare"
    snakefile.write_text(BARE.format(cfg=cfg))
    return snakefile
