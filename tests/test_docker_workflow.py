"""The smoke benchmark end to end through the workflow on the docker provider."""

import subprocess

import pytest

from docker_fixtures import docker_base_image, docker_engine  # noqa: F401 (fixtures)
from workflow_util import REPO, SMOKE_TASKS, rollouts, snakemake

pytestmark = pytest.mark.slow


def test_oracle_resolves_smoke_in_containers_and_leaves_none(tmp_path, docker_engine, docker_base_image):
    run = f"docker-{tmp_path.name}"[:40]
    proc = snakemake(tmp_path, "--configfile", str(REPO / "config" / "smoke_docker.yaml"),
                     "--config", f"run={run}", f"sandbox={{'default_image': '{docker_base_image}'}}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = rollouts(tmp_path, run)
    assert len(rows) == sum(1 for l in SMOKE_TASKS.read_text().splitlines() if l.strip())
    assert all(r["resolved"] for r in rows), [(r["instance_id"], r["failure_class"]) for r in rows]
    left = subprocess.run([docker_engine, "ps", "-aq", "--filter", f"label=sandbatch.run={run}"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert left == []
