"""The benchmarks the tool knows by name: where each one's tasks come from, how many there
are, which images they need, and whether a task file is present here (`sandbatch
benchmarks`; `sandbatch fetch-tasks NAME` writes one). A name is also the `benchmark.kind`
of the configs that run it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core import resources
from ..core.errors import UserError
from .base import resolve_path


@dataclass(frozen=True)
class Benchmark:
    name: str
    family: str
    dataset: str | None  # Hugging Face dataset id of the rows (split `test`), or None
    git: str | None  # git repository: Pro's run_scripts/, or Terminal-Bench's task directories
    out: str  # where the shipped configs expect the tasks (relative: the working directory first)
    rows: int  # the published number of tasks
    images: str  # the images its tasks run in, and where they come from
    bundled: bool = False  # carried by the package itself (resources: data/smoke)


CATALOG: dict[str, Benchmark] = {b.name: b for b in (
    Benchmark("smoke", "smoke (bundled)", None, None, "data/smoke/tasks.jsonl", 5,
              "none with the local provider; with docker sandbatch/base:bookworm, built here "
              "(scripts/build-base-image.sh)", bundled=True),
    Benchmark("swebench", "SWE-bench Verified", "princeton-nlp/SWE-bench_Verified", None,
              "data/swe_verified/tasks.jsonl", 500,
              "one per task: swebench/sweb.eval.x86_64.<instance>:latest (Docker Hub)"),
    Benchmark("swebench_multilingual", "SWE-bench Multilingual", "SWE-bench/SWE-bench_Multilingual", None,
              "data/swe_multilingual/tasks.jsonl", 300,
              "one per task: swebench/sweb.eval.x86_64.<instance>:latest (Docker Hub)"),
    Benchmark("swebench_pro", "SWE-bench Pro", "ScaleAI/SWE-bench_Pro", "https://github.com/scaleapi/SWE-bench_Pro-os",
              "data/swe_pro/tasks.jsonl", 731, "one per task: jefzda/sweap-images:<dockerhub_tag> (Docker Hub)"),
    Benchmark("terminal_bench", "Terminal-Bench 2.x", None, "https://github.com/laude-institute/terminal-bench-2",
              "data/terminal_bench", 89, "one per task: task.toml's environment.docker_image (Docker Hub)"),
)}
SPLIT = "test"  # fetch-tasks' default split of every dataset
# the names people type for them elsewhere (Harbor's and the datasets' spelling), hyphens or not
ALIASES = {"swebench_verified": "swebench", "swe_bench_verified": "swebench",
           "swe_bench_multilingual": "swebench_multilingual", "swe_bench_pro": "swebench_pro"}


def get(name: str) -> Benchmark:
    key = name.replace("-", "_")
    key = ALIASES.get(key, key)
    if key not in CATALOG:
        raise UserError(f"benchmark {name!r} is not known; `sandbatch benchmarks` lists them: {', '.join(CATALOG)}")
    return CATALOG[key]


def source(b: Benchmark) -> str:
    """Where its tasks come from, in words."""
    if b.bundled:
        return f"bundled: {resources.resource(b.out)}"
    parts = [f"Hugging Face dataset {b.dataset} (split {SPLIT})"] if b.dataset else []
    if b.git:
        parts.append(f"git {b.git}" + (" (run_scripts/)" if b.dataset else " (task directories)"))
    return " + ".join(parts)


def count_tasks(path: Path) -> int:
    """Rows of a JSONL task file, or task directories (holding task.toml) of a directory."""
    if path.is_dir():
        return sum(1 for p in path.iterdir() if (p / "task.toml").is_file())
    with open(path, encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip())


def present(b: Benchmark) -> Path | None:
    """The task file the shipped configs would read from this directory, if there is one."""
    path = resolve_path(b.out, [resources.root()])
    return path if path.exists() else None


def describe(b: Benchmark) -> dict:
    here = present(b)
    return {**asdict(b), "split": SPLIT if b.dataset else None, "source": source(b),
            "present": str(here) if here else None, "rows_present": count_tasks(here) if here else None}


def render(rows: list[dict]) -> str:
    out = []
    for r in rows:
        here = (f"present: {r['present']} ({r['rows_present']} tasks)" if r["present"]
                else f"not here: sandbatch fetch-tasks {r['name']}")
        out += [f"{r['name']}  [{r['family']}, {r['rows']} tasks]",
                f"  tasks:  {r['source']}",
                f"  images: {r['images']}",
                f"  {here}", ""]
    return "\n".join(out)


def as_json(rows: list[dict]) -> str:
    return json.dumps(rows, indent=2)
