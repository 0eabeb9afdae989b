"""benchmarks/host_cpu.py in a reduced size, on Docker: it runs both suites and prints the
figures docs/concurrency.md and the README quote (printed, not asserted: the machine is
shared, speed targets live in the script's output). Harbor's side is not run here: it needs
Harbor in a venv of its own and ~5 minutes."""

import re
import subprocess
import sys

import pytest
from docker_fixtures import docker_engine  # noqa: F401
from workflow_util import REPO

# the CPU benchmarks one after the other, not measuring each other (conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("benchmarks")]


def test_host_cpu_benchmark_prints_its_figures(tmp_path, docker_engine):  # noqa: F811
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "host_cpu.py"), "--suite", "both", "-n", "2",
                           "-c", "1", "2", "--keep", str(tmp_path)], capture_output=True, text=True, timeout=900)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for suite, n in (("tb", 2), ("swe", 5)):
        for c in (1, 2):
            assert f"sandbatch {suite} C={c}: {n} rollouts, {n} resolved; wall " in out, (suite, c)
    for figure in ("fixed cost ", "outside the agent and the tests ", "the CPU all of it needs: ",
                   "wall at C=2 / at C=1: "):
        assert figure in out, figure
    # every step's Docker operations were seen: creates, execs and copies, none missing
    ops = re.findall(r"engine operations per rollout: sandbox: create ([\d.]+).*total ([\d.]+)", out)
    assert len(ops) == 4 and all(float(create) >= 1 and float(total) >= 10 for create, total in ops), ops
