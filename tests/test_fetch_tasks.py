"""`sandbatch fetch-tasks` from a local dataset directory and a local git repository:
the real `datasets` library and the real git, and nothing leaves the machine."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbatch import REPO_ROOT

FIX = REPO_ROOT / "tests" / "fixtures" / "bench"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@localhost"}


def fetch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    # offline, with a cache of its own: a test that reached for the Hub would fail
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), **GIT_ENV)
    return subprocess.run([sys.executable, "-m", "sandbatch.cli", "fetch-tasks", *args], capture_output=True,
                          text=True, timeout=300, env=env, cwd=tmp_path)


def dataset_dir(tmp_path: Path, rows: list[dict]) -> Path:
    """A local dataset laid out as the Hub serves one: data/<split>-00000-of-00001.parquet."""
    import datasets

    d = tmp_path / "dataset"
    (d / "data").mkdir(parents=True)
    datasets.Dataset.from_list(rows).to_parquet(str(d / "data" / "test-00000-of-00001.parquet"))
    return d


def git_repo(tmp_path: Path, files: dict[str, Path]) -> Path:
    """A local git repository holding `files` (path in repo -> file or directory to copy)."""
    repo = tmp_path / "repo"
    for rel, src in files.items():
        dest = repo / rel
        if src.is_dir():
            shutil.copytree(src, dest)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dest)
    env = {**os.environ, **GIT_ENV}
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "tasks"]):
        subprocess.run(cmd, cwd=repo, check=True, env=env)
    return repo


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_swebench_rows_from_a_local_dataset_load_as_written(tmp_path):
    # the classic rows, every column a string as in the dataset
    rows = [{k: v if isinstance(v, str) else json.dumps(v) for k, v in r.items()}
            for r in rows_of(FIX / "swebench_verified.jsonl") if "eval_script" not in r]
    columns = sorted({k for r in rows for k in r})
    rows = [{k: r.get(k, "") for k in columns} for r in rows]
    assert len(rows) == 2
    res = fetch(tmp_path, "swebench", "--dataset", str(dataset_dir(tmp_path, rows)))
    assert res.returncode == 0, res.stderr
    out = tmp_path / "data" / "swe_verified" / "tasks.jsonl"  # where config/swe_verified.yaml looks
    assert f"wrote {len(rows)} swebench tasks to data/swe_verified/tasks.jsonl" in res.stdout
    fetched = rows_of(out)
    assert [r["instance_id"] for r in fetched] == [r["instance_id"] for r in rows]
    assert fetched == rows  # every column, every value as the dataset has it
    # a second fetch does not overwrite silently
    again = fetch(tmp_path, "swebench", "--dataset", str(tmp_path / "dataset"))
    assert again.returncode != 0 and "exists; pass --force" in again.stderr
    assert fetch(tmp_path, "swebench", "--dataset", str(tmp_path / "dataset"), "--force").returncode == 0


def test_pro_rows_and_run_scripts_from_the_evaluation_repository(tmp_path):
    row = rows_of(FIX / "swe_pro" / "tasks.jsonl")[0]
    row.pop("repo_dir")  # a dataset row: the image holds the repository
    iid = row["instance_id"]
    repo = git_repo(tmp_path, {f"run_scripts/{iid}": FIX / "swe_pro" / "run_scripts" / iid, "README.md":
                               REPO_ROOT / "README.md"})
    out = tmp_path / "pro" / "tasks.jsonl"
    res = fetch(tmp_path, "swebench_pro", "--dataset", str(dataset_dir(tmp_path, [row])), "--git", str(repo),
                "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert rows_of(out) == [row]
    assert (out.parent / "run_scripts" / iid / "run_script.sh").read_text() == \
        (FIX / "swe_pro" / "run_scripts" / iid / "run_script.sh").read_text()
    from sandbatch.tasks import swebench_pro

    (task, _), = swebench_pro.scan(out)
    assert task.image == f"jefzda/sweap-images:{row['dockerhub_tag']}" and "pytest" in task.run_script


def test_pro_without_run_scripts_is_refused_and_writes_nothing(tmp_path):
    row = {k: v for k, v in rows_of(FIX / "swe_pro" / "tasks.jsonl")[0].items() if k != "repo_dir"}
    repo = git_repo(tmp_path, {"README.md": REPO_ROOT / "README.md"})
    res = fetch(tmp_path, "swebench_pro", "--dataset", str(dataset_dir(tmp_path, [row])), "--git", str(repo))
    assert res.returncode != 0
    assert res.stderr.strip().splitlines()[-1:] == [
        "sandbatch: error: fetch-tasks: the repository has no run_scripts/ directory; give Pro's evaluation "
        "repository with --git"]
    assert not (tmp_path / "data" / "swe_pro").exists() or not any((tmp_path / "data" / "swe_pro").iterdir())


def test_terminal_bench_task_directories_from_a_git_repository(tmp_path):
    repo = git_repo(tmp_path, {"tasks/hello-world": FIX / "terminal_bench" / "hello-world",
                               "tasks/json-reward": FIX / "terminal_bench" / "json-reward"})
    res = fetch(tmp_path, "terminal_bench", "--git", str(repo))
    assert res.returncode == 0, res.stderr
    out = tmp_path / "data" / "terminal_bench"
    assert sorted(p.name for p in out.iterdir()) == ["hello-world", "json-reward"]
    from sandbatch.tasks import terminal_bench

    assert sorted(t.instance_id for t, _ in terminal_bench.scan(out)) == ["hello-world", "json-reward"]


@pytest.mark.parametrize("args, message", [
    (["swebench_lite"], "benchmark 'swebench_lite' is not known; `sandbatch benchmarks` lists them: smoke, swebench, "),
    (["swebench", "--dataset", "/nonexistent/dataset"], "cannot load dataset '/nonexistent/dataset'"),
    (["terminal_bench", "--git", "/nonexistent/repo"], "git clone /nonexistent/repo failed"),
])
def test_bad_sources_are_one_line_errors(tmp_path, args, message):
    res = fetch(tmp_path, *args)
    assert res.returncode == 2
    errors = [line for line in res.stderr.splitlines() if line.startswith("sandbatch: error: ")]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in res.stderr, res.stderr
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").rglob("*.jsonl"))


def cli(tmp_path: Path, *args: str, **env_extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), **GIT_ENV, **env_extra)
    return subprocess.run([sys.executable, "-m", "sandbatch.cli", *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path)


def test_benchmarks_lists_every_known_benchmark(tmp_path):
    from sandbatch.tasks import BENCHMARKS

    res = cli(tmp_path, "benchmarks", "--json")
    assert res.returncode == 0, res.stderr
    listed = {b["name"]: b for b in json.loads(res.stdout)}
    assert set(listed) == set(BENCHMARKS)  # every benchmark.kind, by the same name
    assert listed["smoke"]["present"] and listed["smoke"]["rows_present"] == 5
    assert listed["swebench"]["dataset"] == "princeton-nlp/SWE-bench_Verified" and not listed["swebench"]["present"]
    assert "jefzda/sweap-images" in listed["swebench_pro"]["images"]
    text = cli(tmp_path, "benchmarks").stdout
    assert "not here: sandbatch fetch-tasks terminal_bench" in text and "[SWE-bench Multilingual, 300 tasks]" in text


@pytest.mark.parametrize("name", ["swebench", "swebench_multilingual", "swebench_pro", "terminal_bench"])
def test_fetch_without_network_is_one_line_naming_what_it_tried(tmp_path, name):
    # the Hub offline, and git's HTTPS through a proxy nothing listens on: no network either way
    from sandbatch.tasks.catalog import CATALOG

    res = cli(tmp_path, "fetch-tasks", name, https_proxy="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9")
    assert res.returncode == 2
    errors = [line for line in res.stderr.splitlines() if line.startswith("sandbatch: error: ")]
    tried = CATALOG[name].git if name in ("swebench_pro", "terminal_bench") else CATALOG[name].dataset
    assert len(errors) == 1 and tried in errors[0] and "Traceback" not in res.stderr, res.stderr
    assert not (tmp_path / "data").exists()  # nothing half-written, not even an empty directory


def test_the_missing_smoke_file_error_suggests_a_command_that_works(tmp_path):
    override = 'benchmark={"tasks": "mine/tasks.jsonl"}'
    res = cli(tmp_path, "validate", "--config", override)
    assert res.returncode == 2
    suggested = re.search(r"`(sandbatch fetch-tasks [^`]+)`", res.stderr)
    assert suggested, res.stderr
    assert suggested.group(1) == "sandbatch fetch-tasks smoke --out mine/tasks.jsonl"
    res = cli(tmp_path, *shlex.split(suggested.group(1))[1:])
    assert res.returncode == 0 and "wrote 5 smoke tasks to mine/tasks.jsonl" in res.stdout, res.stderr
    assert (tmp_path / "mine" / "repos" / "calc" / "calc.py").is_file()
    res = cli(tmp_path, "validate", "--config", override)
    assert res.returncode == 0 and "# ok: 5 tasks x 1 repeats" in res.stderr, res.stderr
    assert "tasks: mine/tasks.jsonl" in res.stdout
