"""`sandbatch fetch-tasks`: write the task file a benchmark config names, from its public source.

SWE-bench Verified / Multilingual / Pro rows come from their datasets through the
`datasets` library (a Hugging Face id, or a local dataset directory); Pro's
`run_scripts/<instance_id>/` come from its public evaluation repository, and
Terminal-Bench 2.x task directories from its git repository, both by `git clone`.
What is written is loaded with the benchmark's own loader before it replaces anything,
so a fetched file that the run would refuse is refused here.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import UserError
from . import BENCHMARKS


@dataclass(frozen=True)
class Source:
    dataset: str | None  # Hugging Face dataset id (rows), or None for a git repository of task dirs
    git: str | None  # git repository: Pro's run_scripts/, or Terminal-Bench's task directories
    out: str  # where the benchmark configs (config/<benchmark>.yaml) expect the tasks


SOURCES: dict[str, Source] = {
    "swebench": Source("princeton-nlp/SWE-bench_Verified", None, "data/swe_verified/tasks.jsonl"),
    "swebench_multilingual": Source("SWE-bench/SWE-bench_Multilingual", None, "data/swe_multilingual/tasks.jsonl"),
    "swebench_pro": Source("ScaleAI/SWE-bench_Pro", "https://github.com/scaleapi/SWE-bench_Pro-os",
                           "data/swe_pro/tasks.jsonl"),
    "terminal_bench": Source(None, "https://github.com/laude-institute/terminal-bench-2", "data/terminal_bench"),
}


def fetch_tasks(benchmark: str, out: str | None = None, dataset: str | None = None, split: str = "test",
                revision: str | None = None, git: str | None = None, git_ref: str | None = None,
                force: bool = False) -> tuple[Path, int]:
    """Write the benchmark's tasks to `out`; (path written, number of tasks)."""
    if benchmark not in SOURCES:
        raise UserError(f"fetch-tasks: benchmark {benchmark!r} is not known; choose one of: {', '.join(SOURCES)}")
    src = SOURCES[benchmark]
    path = Path(out or src.out)
    if path.exists() and not force:
        raise UserError(f"fetch-tasks: {path} exists; pass --force to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.") as tmp:
        staged = Path(tmp) / path.name
        if src.dataset is None:
            _task_dirs(_clone(git or src.git, git_ref, Path(tmp) / "repo"), staged)
        else:
            if benchmark == "swebench_pro":  # first: the small download that fails fast
                _run_scripts(_clone(git or src.git, git_ref, Path(tmp) / "repo"), Path(tmp) / "run_scripts")
            _rows(dataset or src.dataset, split, revision, staged)
        n = _check(benchmark, staged)
        _replace(staged, path)
        if benchmark == "swebench_pro":
            _replace(Path(tmp) / "run_scripts", path.parent / "run_scripts")
    return path, n


def _rows(dataset: str, split: str, revision: str | None, dest: Path) -> None:
    try:
        import datasets
    except ImportError:
        raise UserError("fetch-tasks: the datasets library is missing; pip install datasets") from None
    try:
        rows = datasets.load_dataset(dataset, split=split, revision=revision)
    except Exception as exc:  # the library raises many types (network, missing split, bad files)
        raise UserError(f"fetch-tasks: cannot load dataset {dataset!r} split {split!r}: "
                        f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    with open(dest, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")


def _clone(url: str, ref: str | None, dest: Path) -> Path:
    cmd = ["git", "clone", "--quiet", "--depth", "1", *(["--branch", ref] if ref else []), url, str(dest)]
    if Path(url).is_dir():  # a local repository: --depth needs a file:// URL
        cmd[cmd.index(url)] = Path(url).resolve().as_uri()
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        why = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"fetch-tasks: git clone {url} failed: {why}")
    return dest


def _run_scripts(repo: Path, dest: Path) -> None:
    scripts = repo / "run_scripts"
    if not scripts.is_dir():
        raise UserError(f"fetch-tasks: the repository has no run_scripts/ directory; give Pro's evaluation "
                        f"repository with --git")
    shutil.copytree(scripts, dest)


def _task_dirs(repo: Path, dest: Path) -> None:
    """Every directory holding a task.toml, at the top level of `dest`."""
    found = sorted(p.parent for p in repo.rglob("task.toml") if ".git" not in p.parts)
    if not found:
        raise UserError("fetch-tasks: the repository holds no task directory (no task.toml); give a "
                        "Terminal-Bench 2.x repository with --git")
    dest.mkdir()
    for d in found:
        if (dest / d.name).exists():
            raise UserError(f"fetch-tasks: two task directories are named {d.name!r}")
        shutil.copytree(d, dest / d.name)


def _check(benchmark: str, staged: Path) -> int:
    """Load what was written with the benchmark's loader (errors name the file and row)."""
    tasks = importlib.import_module(BENCHMARKS[benchmark]).scan(staged)
    if not tasks:
        raise UserError(f"fetch-tasks: no task came out of the source of {benchmark}")
    return len(tasks)


def _replace(staged: Path, path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    staged.rename(path)
