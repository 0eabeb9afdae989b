"""benchmarks/history_strip.py in a reduced size: it runs and prints its figures (printed,
not asserted: the machine is shared, speed targets live in the script's output)."""

import subprocess
import sys

import pytest

from docker_fixtures import docker_base_image, docker_engine  # noqa: F401 (fixtures)
from workflow_util import REPO

pytestmark = pytest.mark.slow


def test_history_benchmark_prints_its_figures(tmp_path, docker_engine, docker_base_image):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "history_strip.py"), "--sizes", "tiny",
                           "--providers", "docker", "--repeats", "1", "--cache", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "tiny: 600 commits (300 up to the base)" in out
    for figure in ("per sandbox: prepare keep ", "added ", "CPU-s; objects ", "once per image: first use "):
        assert figure in out, figure
    tag = next(line for line in subprocess.run([docker_engine, "images", "--format", "{{.Repository}}:{{.Tag}}"],
                                               capture_output=True, text=True).stdout.split()
               if line.startswith("sandbatch/bench-history-tiny-"))
    subprocess.run([docker_engine, "image", "rm", tag], capture_output=True)
