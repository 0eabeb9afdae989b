"""The smoke benchmark through the Slurm profile on a real single-node Slurm."""

import time

import pytest

from services import need
from slurm_util import jobs_seen_since, slurm_unavailable
from workflow_util import rollouts, snakemake

pytestmark = pytest.mark.slow


def test_one_slurm_job_per_rollout_and_the_aggregate_stays_local(tmp_path):
    need(slurm_unavailable())
    t0 = time.time()
    proc = snakemake(tmp_path, "--workflow-profile", "slurm", "--slurm-init-seconds-before-status-checks", "5",
                     "--config", "run=slurm", "concurrency=2", "benchmark={'limit': 3}", timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = rollouts(tmp_path, "slurm")
    assert len(rows) == 3 and all(r["resolved"] for r in rows)

    jobs = [j for j in jobs_seen_since(t0) if j.comment.startswith("rule_rollout")]
    assert len(jobs) == 3, jobs  # one per rollout, never one per step
    assert all(j.state == "COMPLETED" for j in jobs), jobs
    assert len({j.name for j in jobs}) == 1  # all of this run
    for job in jobs:
        logs = list((tmp_path / ".snakemake" / "slurm_logs").glob(f"group_rollout_*/{job.id}.log"))
        assert logs, f"no Slurm log for job {job.id}"
    assert not [j for j in jobs_seen_since(t0) if "aggregate" in j.comment or "settings" in j.comment]
    log = proc.stdout + proc.stderr
    assert "localrule aggregate" in log
    # concurrency=2: the third rollout is submitted only once one of the first two has ended
    # (Slurm's times are whole seconds: "after" reads as >= at that resolution)
    first, second, third = sorted(jobs, key=lambda j: (j.submitted, int(j.id.split("_")[0])))[:3]
    ends = [j.ended for j in (first, second) if j.ended is not None]
    assert ends, f"no end time for the first two jobs: {first}, {second}"
    assert third.submitted >= min(ends), f"the third rollout did not wait for a free slot: {first, second, third}"
