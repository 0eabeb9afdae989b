"""benchmarks/utilisation.py in a reduced size: it runs and prints its figures (printed, not
asserted: the machine is shared, speed targets live in the script's output)."""

import subprocess
import sys

import pytest
from workflow_util import REPO

# the CPU benchmarks one after the other, not measuring each other (conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("benchmarks")]


def test_utilisation_benchmark_prints_its_figures(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "utilisation.py"), "-n", "4", "-c", "2",
                           "-t", "1", "--keep", str(tmp_path)], capture_output=True, text=True, timeout=600)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "N=4 rollouts, C=2, T=1 s; 0 unresolved, 0 infra errors" in out
    for figure in ("wall ", "ideal ceil(N/C) x T = 2 s; ratio ", "mean busy slots ", "agents running ",
                   "peaks of the process tree",
                   "create", "prepare", "install", "patch (extract)", "grade-sandbox create",
                   "delete agent sandbox", "delete grading sandbox", "gap harness -> patch", "sum"):
        assert figure in out, figure
    # the hold made the agent last its second
    rollout = next((tmp_path / "0" / "results").glob("util-local-*/*/0/"))
    assert '"agent_s": 1.' in (rollout / "harness.json").read_text()
    # the step server reported the patch step done before it deleted the agent's sandbox
    assert "after the step was reported done" in (rollout / "logs" / "patch.log").read_text()
