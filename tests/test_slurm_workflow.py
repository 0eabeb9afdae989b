"""The smoke benchmark through the Slurm profile on a real single-node Slurm."""

import re
import time

import pytest

from services import need
from slurm_util import jobs_seen_since, slurm_unavailable
from workflow_util import rollouts, snakemake

# one Slurm node: its CPUs are not shared with the other Slurm tests (conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


SERVER_LINE = re.compile(r"sandbatch: step server: (\d+) steps; CPU ([\d.]+) s \(imports and serving ([\d.]+), "
                         r"steps ([\d.]+)\)")
RUN_ARGS = ("--config", "concurrency=2", "benchmark={'limit': 3}")
N = 5  # rollouts of the CPU comparison: every smoke task once
COST_ARGS = ("--config", "concurrency=2", f"benchmark={{'limit': {N}}}")


def step_servers(text: str) -> list[tuple[int, float, float]]:
    """(steps, CPU-s of the server's imports and serving, CPU-s of its forked steps) of every
    step server that reported in a log."""
    return [(int(m[1]), float(m[3]), float(m[4])) for m in SERVER_LINE.finditer(text)]


def test_one_slurm_job_per_rollout_and_the_aggregate_stays_local(tmp_path):
    need(slurm_unavailable())
    t0 = time.time()
    proc = snakemake(tmp_path, "--workflow-profile", "slurm", "--slurm-init-seconds-before-status-checks", "5",
                     *RUN_ARGS, "run=slurm", timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = rollouts(tmp_path, "slurm")
    assert len(rows) == 3 and all(r["resolved"] for r in rows)

    # this run's jobs: those whose Slurm log is in its directory (another user's run may share the cluster)
    logged = {p.stem for p in (tmp_path / ".snakemake" / "slurm_logs").rglob("*.log")}
    jobs = [j for j in jobs_seen_since(t0) if j.id in logged]
    assert len(jobs) == 3 and all(j.comment.startswith("rule_rollout") for j in jobs), jobs  # one per rollout
    assert all(j.state == "COMPLETED" for j in jobs), jobs
    assert len({j.name for j in jobs}) == 1  # all of this run
    for job in jobs:
        logs = list((tmp_path / ".snakemake" / "slurm_logs").glob(f"group_rollout_*/{job.id}.log"))
        assert logs, f"no Slurm log for job {job.id}"
        # each job's Snakemake had a step server, and every step of the rollout went to it
        served = step_servers(logs[0].read_text())
        assert [steps for steps, _, _ in served] == [5], (job, logs[0].read_text()[-3000:])
    log = proc.stdout + proc.stderr
    assert "localrule aggregate" in log
    # concurrency=2: the third rollout is submitted only once one of the first two has ended
    # (Slurm's times are whole seconds: "after" reads as >= at that resolution)
    first, second, third = sorted(jobs, key=lambda j: (j.submitted, int(j.id.split("_")[0])))[:3]
    ends = [j.ended for j in (first, second) if j.ended is not None]
    assert ends, f"no end time for the first two jobs: {first}, {second}"
    assert third.submitted >= min(ends), f"the third rollout did not wait for a free slot: {first, second, third}"


def test_slurm_steps_cost_what_they_cost_locally(tmp_path):
    """CPU of the rollouts' steps on Slurm against the same run on the local executor, as
    each step server reports when it stops: its forked steps' (and what they ran), and its
    own (imports and serving: once per job on Slurm, once per run locally)."""
    need(slurm_unavailable())
    for where in ("local", "slurm"):
        (tmp_path / where).mkdir()
    local = snakemake(tmp_path / "local", *COST_ARGS, "run=local", timeout=900)
    assert local.returncode == 0, local.stderr[-3000:]
    [(steps, local_own, local_steps)] = step_servers(local.stderr)
    assert steps == 5 * N + 1  # and the aggregate, which on Slurm runs in the main process instead
    slurm = snakemake(tmp_path / "slurm", "--workflow-profile", "slurm", "--slurm-init-seconds-before-status-checks",
                      "5", *COST_ARGS, "run=slurm", timeout=900)
    assert slurm.returncode == 0, slurm.stderr[-3000:]
    logs = sorted((tmp_path / "slurm" / ".snakemake" / "slurm_logs").glob("group_rollout_*/*.log"))
    served = [s for log in logs for s in step_servers(log.read_text())]
    assert [steps for steps, _, _ in served] == [5] * N, served  # one server per job, every step forked
    slurm_own, slurm_steps = sum(s[1] for s in served), sum(s[2] for s in served)
    print(f"\nCPU-s per rollout, steps / step server's imports and serving / both: Slurm {slurm_steps / N:.2f} / "
          f"{slurm_own / N:.2f} / {(slurm_steps + slurm_own) / N:.2f}; local {local_steps / N:.2f} / "
          f"{local_own / N:.2f} / {(local_steps + local_own) / N:.2f}; "
          f"ratio of the steps {slurm_steps / local_steps:.2f}, "
          f"of both {(slurm_steps + slurm_own) / (local_steps + local_own):.2f}")
    assert slurm_steps <= 1.3 * local_steps
