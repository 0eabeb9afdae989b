"""Task loaders of every benchmark family, on hand-written rows that follow the public
schemas: awkward-but-valid rows load, malformed ones fail in one line naming file:line
and field, and the parse-time index is cached and invalidated."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sandbatch import REPO_ROOT
from sandbatch.core import config
from sandbatch.core.errors import UserError
from sandbatch.core.ids import path_id
from sandbatch.tasks import index, load_tasks, select_tasks
from sandbatch.tasks import swebench as swe_loader
from sandbatch.tasks.base import parse_list
from sandbatch.core.config import check_template
from sandbatch.tasks.settings import prompt_for, resources_for, timeouts_for

FIX = REPO_ROOT / "tests" / "fixtures" / "bench"


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the index cache lands in tmp_path/.snakemake


def cfg_for(kind: str, tasks: Path | str, **bench) -> config.Config:
    return config.load([], {"benchmark": {"kind": kind, "tasks": str(tasks), **bench}},
                       default=REPO_ROOT / "config" / "default.yaml")


def by_id(cfg):
    return {t.instance_id: t for t in load_tasks(cfg.benchmark)}


# --- valid rows ---------------------------------------------------------------------

def test_swebench_verified_rows():
    tasks = by_id(cfg_for("swebench", FIX / "swebench_verified.jsonl"))
    assert list(tasks) == ["astropy__astropy-12907", "django__django-11099", "example__ünïcode-7"]
    a = tasks["astropy__astropy-12907"]
    assert a.family == "swebench" and a.workdir == "/testbed" and a.version == "4.3"
    assert a.image == "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"
    assert a.fail_to_pass == ["astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]",
                              "astropy/modeling/tests/test_separable.py::test_separable[compound_model9-result9]"]
    assert a.prompt == a.problem_statement and a.extra["hints_text"] == ""
    d = tasks["django__django-11099"]  # real JSON lists, a numeric version, optional fields missing
    assert d.version == "3.0" and d.pass_to_pass == [] and d.eval_script is None
    u = tasks["example__ünïcode-7"]  # self-describing, Python-literal list, non-ASCII id
    assert u.fail_to_pass == ["tests/test_a.py::test_names[é]"]
    assert u.image == "registry.example.com/swe/example-unicode-7:v1"
    assert u.log_parser == "parse_log_pytest" and u.eval_type == "pass_and_fail" and "pytest -rA" in u.eval_script
    assert u.id == path_id(u.instance_id) and re.fullmatch(r"[A-Za-z0-9_.-]+", u.id) and u.id != u.instance_id


def test_swebench_multilingual_rows():
    tasks = by_id(cfg_for("swebench_multilingual", FIX / "swebench_multilingual.jsonl"))
    assert tasks["gin-gonic__gin-4003"].fail_to_pass == ["TestMethodNotAllowedNoRoute"]
    assert tasks["redis__redis-13115"].image == "swebench/sweb.eval.x86_64.redis_1776_redis-13115:latest"


def test_swebench_pro_rows():
    (t,) = load_tasks(cfg_for("swebench_pro", FIX / "swe_pro" / "tasks.jsonl").benchmark)
    assert t.family == "swebench_pro" and t.workdir == "/app" and t.reset_to_base
    assert t.image == "jefzda/sweap-images:greeter.greeter-greeter__greeter-0001"
    assert t.entrypoint and t.entrypoint[0] == "/bin/sh"  # ENTRYPOINT /bin/bash images stay alive
    assert t.fail_to_pass == ["tests/test_greet.py::test_greet_punctuation"]  # a Python-literal string
    assert t.pass_to_pass == ["tests/test_greet.py::test_greet_returns_str"]  # a JSON string
    assert t.selected_test_files == ["tests/test_greet.py"]
    assert "pytest -v" in t.run_script and "json.dump" in t.parser_script  # from run_scripts/<id>/
    assert t.prompt.startswith(t.problem_statement.strip())
    assert "Requirements:\n- `greet(name)`" in t.prompt and "New interfaces introduced:" in t.prompt


def test_terminal_bench_dirs():
    cfg = cfg_for("terminal_bench", FIX / "terminal_bench")
    tasks = by_id(cfg)
    assert list(tasks) == ["hello-world", "json-reward", "no-reward"]
    h, j = tasks["hello-world"], tasks["json-reward"]
    assert h.family == "terminal_bench" and h.workdir == "/app" and j.workdir == "/workspace"
    assert h.image == "ghcr.io/example/tb-hello-world:20251031" and h.snapshot_workdir
    assert h.prompt.startswith("Create a file called hello.txt")
    assert h.timeouts == {"agent": 120.0, "grade": 60.0}
    assert h.resources == {"cpu": "1", "memory": "2048Mi", "disk": "10240Mi"}
    assert Path(h.task_dir, "tests", "test.sh").is_file()
    t = timeouts_for(cfg, h)  # task.toml wins over the config's timeouts, per task
    assert (t.agent, t.grade, t.sandbox) == (120.0, 60.0, cfg.timeouts.sandbox)
    off = cfg_for("terminal_bench", FIX / "terminal_bench", task_timeouts=False)
    assert timeouts_for(off, h).agent == off.timeouts.agent


# --- settings -------------------------------------------------------------------------

def test_prompt_template_and_resources():
    cfg = cfg_for("swebench_pro", FIX / "swe_pro" / "tasks.jsonl",
                  prompt_template="Repo {repo} in {workdir}.\n\n{problem_statement}\n--\n{interface}",
                  resources={"cpu": "2", "memory": "4Gi"},
                  repo_resources={"greeter/greeter": {"memory": "16Gi"}})
    (t,) = load_tasks(cfg.benchmark)
    assert prompt_for(t, cfg.benchmark) == (f"Repo greeter/greeter in /app.\n\n{t.problem_statement}\n--\n"
                                            "No new interfaces are introduced.")
    assert resources_for(cfg, t) == {"cpu": "2", "memory": "16Gi"}
    tb = cfg_for("terminal_bench", FIX / "terminal_bench", resources={"cpu": "4", "disk": "1Gi"})
    h = by_id(tb)["hello-world"]
    assert resources_for(tb, h) == {"cpu": "1", "disk": "10240Mi", "memory": "2048Mi"}  # task.toml wins


@pytest.mark.parametrize("template, message", [
    ("{problem}", "unknown placeholder {problem}"),
    ("{prompt", "write literal braces"),
])
def test_bad_prompt_template(template, message):
    with pytest.raises(UserError, match=re.escape(message)):
        check_template(template)
    with pytest.raises(UserError, match="benchmark.prompt_template"):
        cfg_for("smoke", "data/smoke/tasks.jsonl", prompt_template=template)


def test_parse_list_never_executes():
    assert parse_list("['a', \"b\"]", "w") == ["a", "b"]
    assert parse_list('["a"]', "w") == ["a"]
    assert parse_list("('a',)", "w") == ["a"]
    assert parse_list("", "w") == [] and parse_list(None, "w") == []
    for bad in ("__import__('os').system('touch PWNED')", "[1, 2]", "{'a': 1}", "[open('x')]"):
        with pytest.raises(UserError, match="^w: "):
            parse_list(bad, "w")
    assert not Path("PWNED").exists()


# --- malformed rows: one line, file:line and the field -------------------------------

GOOD_SWE = json.loads((FIX / "swebench_verified.jsonl").read_text(encoding="utf-8").splitlines()[1])
GOOD_PRO = json.loads((FIX / "swe_pro" / "tasks.jsonl").read_text().splitlines()[0])


def _row(base: dict, **changes) -> str:
    row = {**base, **changes}
    return json.dumps({k: v for k, v in row.items() if v is not ...}, ensure_ascii=False)


@pytest.mark.parametrize("kind, base, line2, field", [
    ("swebench", GOOD_SWE, '{"instance_id": "x", ', "not valid JSON"),
    ("swebench", GOOD_SWE, '["a list"]', "must be a JSON object"),
    ("swebench", GOOD_SWE, _row(GOOD_SWE, instance_id="y", problem_statement=...), "field problem_statement"),
    ("swebench", GOOD_SWE, _row(GOOD_SWE, instance_id="y", FAIL_TO_PASS="not a list"), "field FAIL_TO_PASS"),
    ("swebench", GOOD_SWE, _row(GOOD_SWE, instance_id="y", FAIL_TO_PASS="[1, 2]"), "field FAIL_TO_PASS"),
    ("swebench", GOOD_SWE, _row(GOOD_SWE, instance_id="y", PASS_TO_PASS=7), "field PASS_TO_PASS"),
    ("swebench", GOOD_SWE, _row(GOOD_SWE, instance_id="y", eval_script="echo"), "field log_parser"),
    ("swebench", GOOD_SWE, _row(GOOD_SWE, instance_id="y", eval_type="sometimes"), "field eval_type"),
    ("swebench", GOOD_SWE, _row(GOOD_SWE, instance_id="y", repo_dir="nope"), "field repo_dir"),
    ("swebench", GOOD_SWE, _row(GOOD_SWE), "duplicate task id"),
    ("swebench_pro", GOOD_PRO, _row(GOOD_PRO, instance_id="z", before_repo_set_cmd=...), "field before_repo_set_cmd"),
    ("swebench_pro", GOOD_PRO, _row(GOOD_PRO, instance_id="z", fail_to_pass="__import__('os')"),
     "field fail_to_pass"),
    ("swebench_pro", GOOD_PRO, _row(GOOD_PRO, instance_id="z", selected_test_files_to_run="['a', 3]"),
     "field selected_test_files_to_run"),
    ("swebench_pro", GOOD_PRO, _row(GOOD_PRO, instance_id="z", repo_dir=..., dockerhub_tag=...),
     "field dockerhub_tag"),
    ("swebench_pro", GOOD_PRO, _row(GOOD_PRO, instance_id="z", repo_dir=...), "field run_script"),
])
def test_malformed_rows(tmp_path, kind, base, line2, field):
    good = dict(base)
    if kind == "swebench_pro":  # scripts inline, so the fixture row loads from anywhere
        good.update(run_script="true", parser_script="pass", repo_dir=None)
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(good, ensure_ascii=False) + "\n" + line2 + "\n", encoding="utf-8")
    with pytest.raises(UserError) as err:
        load_tasks(cfg_for(kind, path).benchmark)
    msg = str(err.value)
    assert "\n" not in msg
    assert field in msg
    if field != "duplicate task id":
        assert msg.startswith(f"{path}:2: "), msg


def _tb_task(root: Path, name: str, toml: str, instruction: bool = True) -> Path:
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "tests" / "test.sh").write_text("#!/bin/bash\n")
    (d / "task.toml").write_text(toml)
    if instruction:
        (d / "instruction.md").write_text("Do it.\n")
    return d


@pytest.mark.parametrize("toml, expect", [
    ('[agent]\ntimeout_sec = 10\n\n[environment]\ndocker_image = "x"\ncpus = "two"\n',
     r"task.toml:6: field environment.cpus: 'two' is not of type 'number'"),
    ('[environment]\ndocker_image = "x"\n[verifier]\ntimeout_sec = -1\n', r"task.toml:4: field verifier.timeout_sec"),
    ('[environment]\ncpus = 1\n', r"task.toml:1: field environment.docker_image: missing"),
    ('[environment\n', r"task.toml: not valid TOML \(.*line 1"),
])
def test_malformed_terminal_bench(tmp_path, toml, expect):
    _tb_task(tmp_path / "tb", "t1", toml)
    with pytest.raises(UserError, match=expect):
        load_tasks(cfg_for("terminal_bench", tmp_path / "tb").benchmark)


def test_terminal_bench_needs_instruction_and_a_directory(tmp_path):
    _tb_task(tmp_path / "tb", "t1", '[environment]\ndocker_image = "x"\n', instruction=False)
    with pytest.raises(UserError, match=r"t1/instruction.md: not found"):
        load_tasks(cfg_for("terminal_bench", tmp_path / "tb").benchmark)
    with pytest.raises(UserError, match="is not a directory"):
        load_tasks(cfg_for("terminal_bench", FIX / "swebench_verified.jsonl").benchmark)


# --- the parse-time index ---------------------------------------------------------------

def test_index_is_cached_and_invalidated(tmp_path, monkeypatch):
    path = tmp_path / "tasks.jsonl"
    path.write_bytes((FIX / "swebench_verified.jsonl").read_bytes())
    cfg = cfg_for("swebench", path)
    refs = select_tasks(cfg.benchmark)
    assert [r.instance_id for r in refs][0] == "astropy__astropy-12907"
    assert list(Path(".snakemake/sandbatch/index").glob("swebench-*.json"))
    from sandbatch import tasks as tasks_mod

    tasks_mod._index.cache_clear()  # a new process: only the file cache is left

    def no_scan(path):
        raise AssertionError("the cached index should have been used")

    monkeypatch.setattr(swe_loader, "scan", no_scan)
    assert select_tasks(cfg.benchmark) == refs
    # the row is read by its byte offset, validated again
    assert load_tasks(cfg.benchmark)[2].instance_id == "example__ünïcode-7"
    monkeypatch.undo()
    path.write_text(path.read_text(encoding="utf-8") + json.dumps({**GOOD_SWE, "instance_id": "new-1"}) + "\n",
                    encoding="utf-8")
    assert [r.instance_id for r in index(cfg.benchmark)][-1] == "new-1"


def test_selection_on_the_index():
    cfg = cfg_for("swebench", FIX / "swebench_verified.jsonl", filter="django|astropy", limit=1)
    assert [t.instance_id for t in select_tasks(cfg.benchmark)] == ["astropy__astropy-12907"]
    cfg = cfg_for("swebench", FIX / "swebench_verified.jsonl", instance_ids=["example__ünïcode-7"])
    assert [t.instance_id for t in select_tasks(cfg.benchmark)] == ["example__ünïcode-7"]
