"""The wheel `python -m build` makes, installed (not editable) into a fresh virtualenv, runs
from an empty directory: `--help`, `validate` of the embedded default, `benchmarks`, and
the packaged Snakefile on the embedded default (local provider, smoke, oracle) to a 5/5
report under that directory, nothing read from the checkout.

The build is the real one (sdist, then the wheel from it, as a user's `python -m build`
does). To keep it cheap, the fresh environment gets the wheel with --no-deps and, for its
dependencies, links to the packages this test environment already installed (each one's
files and metadata, so entry points such as Snakemake's plugins are found): everything a
`pip install` of the wheel would bring, minus the download, and minus the checkout's
editable sandbatch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from sandbatch import REPO_ROOT

pytestmark = pytest.mark.slow


def run(cmd: list[str], cwd: Path, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{' '.join(map(str, cmd))}: exit {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    return res


def fresh_venv(venv: Path, wheel: Path, env: dict) -> Path:
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], venv.parent, env)
    py = venv / "bin" / "python"
    site = Path(run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                    venv.parent, env).stdout.strip())
    ours = Path(sysconfig.get_paths()["purelib"])
    for entry in ours.iterdir():  # the dependencies, not sandbatch itself nor its editable hook
        if not entry.name.startswith(("sandbatch", "__editable__", "_sandbatch", "__pycache__")):
            (site / entry.name).symlink_to(entry)
    run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        venv.parent, env)
    return venv / "bin"


def test_the_built_wheel_runs_from_an_empty_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON", "VIRTUAL_ENV"))}
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--outdir", str(dist), str(REPO_ROOT)], tmp_path, env, timeout=600)
    bin_dir = fresh_venv(tmp_path / "venv", next(dist.glob("sandbatch-*.whl")), env)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    empty = tmp_path / "empty"
    empty.mkdir()

    assert "fetch-tasks" in run(["sandbatch", "--help"], empty, env).stdout
    where = run([str(bin_dir / "python"), "-c", "import sandbatch; print(sandbatch.__file__)"], empty, env).stdout
    assert where.startswith(str(tmp_path / "venv")), where  # the installed copy, not the checkout's
    snakefile = Path(run(["sandbatch", "path", "snakefile"], empty, env).stdout.strip())
    assert snakefile.is_file() and snakefile.is_relative_to(tmp_path / "venv"), snakefile
    res = run(["sandbatch", "validate"], empty, env)
    assert "# ok: 5 tasks x 1 repeats = 5 rollouts" in res.stderr
    assert "smoke" in run(["sandbatch", "benchmarks"], empty, env).stdout
    shipped = Path(run(["sandbatch", "path", "mini_swe_verified"], empty, env).stdout.strip())
    assert shipped == snakefile.parent / "config" / "mini_swe_verified.yaml" and shipped.is_file()
    res = subprocess.run(["sandbatch", "validate", "config/xs_swe_pro.yaml"], cwd=empty, capture_output=True,
                         text=True, env={k: v for k, v in env.items() if not k.startswith(("OPEN_", "SANDBATCH_"))})
    assert res.returncode == 2 and "config file not found" not in res.stderr  # the shipped one, by its repo path
    assert "export SANDBATCH_MODEL_URL=" in res.stderr and "fetch-tasks swebench_pro" in res.stderr, res.stderr

    run([str(bin_dir / "python"), "-m", "snakemake", "-s", str(snakefile), "--cores", "2"], empty, env, timeout=600)
    metrics = json.loads((empty / "results" / "default" / "metrics.json").read_text())
    assert (metrics["resolved"], metrics["rollouts"]) == (5, 5), metrics
    assert (empty / "results" / "default" / "report.md").is_file()
    assert not list(snakefile.parent.glob("results")) and not (snakefile.parent / ".snakemake").exists()
