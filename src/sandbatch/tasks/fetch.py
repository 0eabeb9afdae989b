"""`sandbatch fetch-tasks`: write the task file a benchmark config names, from its public source.

SWE-bench Verified / Multilingual / Pro rows come from their datasets through the
`datasets` library (a Hugging Face id, or a local dataset directory); Pro's
`run_scripts/<instance_id>/` come from its public evaluation repository, and
Terminal-Bench 2.x task directories from its git repository, both by `git clone`; the
smoke benchmark is copied from the package (with the repositories its rows name). The
names and sources are sandbatch.tasks.catalog's.
What is written is loaded with the benchmark's own loader before it replaces anything,
so a fetched file that the run would refuse is refused here.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..core import resources
from ..core.errors import UserError
from . import BENCHMARKS
from .catalog import Benchmark, get


def fetch_tasks(benchmark: str, out: str | None = None, dataset: str | None = None, split: str = "test",
                revision: str | None = None, git: str | None = None, git_ref: str | None = None,
                force: bool = False) -> tuple[Path, int]:
    """Write the benchmark's tasks to `out`; (path written, number of tasks)."""
    try:
        src = get(benchmark)
    except UserError as exc:
        raise UserError(f"fetch-tasks: {exc}") from None
    path = Path(out or src.out)
    if path.exists() and not force:
        raise UserError(f"fetch-tasks: {path} exists; pass --force to replace it")
    made = [d for d in (path.parent, *path.parent.parents) if not d.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return _fetch(src, path, dataset, split, revision, git, git_ref)
    except BaseException:
        for d in made:  # a failed fetch leaves no empty directory behind
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
        raise


def _fetch(src: Benchmark, path: Path, dataset: str | None, split: str, revision: str | None, git: str | None,
           git_ref: str | None) -> tuple[Path, int]:
    benchmark = src.name
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.") as tmp:
        staged = Path(tmp) / path.name
        if src.bundled:
            _bundled(src.out, staged, Path(tmp) / "repos")
        elif src.dataset is None:
            _task_dirs(_clone(git or src.git, git_ref, Path(tmp) / "repo"), staged)
        else:
            if benchmark == "swebench_pro":  # first: the small download that fails fast
                _run_scripts(_clone(git or src.git, git_ref, Path(tmp) / "repo"), Path(tmp) / "run_scripts")
            _rows(dataset or src.dataset, split, revision, staged)
        n = _check(benchmark, staged)
        _replace(staged, path)
        for beside in ("run_scripts", "repos"):  # what the rows name relative to the task file
            if (Path(tmp) / beside).exists():
                _replace(Path(tmp) / beside, path.parent / beside)
    return path, n


def _bundled(out: str, staged: Path, repos: Path) -> None:
    """The package's own copy: the task file and the repositories its rows name (repo_dir)."""
    shipped = resources.resource(out)
    shutil.copy(shipped, staged)
    shutil.copytree(shipped.parent / "repos", repos, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


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
