"""Recovery after a crash happens at one explicit point that only a run executing jobs reaches:
reading the Snakefile for a dry run or a listing changes nothing on disk."""

from __future__ import annotations

from base64 import urlsafe_b64encode

from sandbatch.ops.owners import INCOMPLETE_DIR, LOCKS_DIR
from workflow_util import snakemake


def _crashed_state(wd):
    """What a SIGKILLed run leaves: a lock, and a half-written output with its incomplete marker."""
    (wd / LOCKS_DIR).mkdir(parents=True)
    (wd / LOCKS_DIR / "0.input.lock").write_text("x\n")
    partial = "results/default/smoke__calc-1/0/sandbox.json"
    (wd / partial).parent.mkdir(parents=True)
    (wd / partial).write_text("{half")
    (wd / INCOMPLETE_DIR).mkdir(parents=True)
    (wd / INCOMPLETE_DIR / urlsafe_b64encode(partial.encode()).decode()).write_text("")
    return wd / partial


def test_dry_run_and_listing_touch_nothing_a_real_run_recovers(tmp_path):
    partial = _crashed_state(tmp_path)
    for args in (["-n"], ["--list-rules"]):
        proc = snakemake(tmp_path, *args, "--config", "benchmark={'limit': 1}")
        assert "removed stale Snakemake locks" not in proc.stderr, args
        assert (tmp_path / LOCKS_DIR / "0.input.lock").exists() and partial.read_text() == "{half", args
    proc = snakemake(tmp_path, "--config", "benchmark={'limit': 1}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "removed stale Snakemake locks" in proc.stderr
    assert "1 output(s) of interrupted jobs will be redone" in proc.stderr
    assert partial.read_text().startswith("{\n") or partial.read_text().startswith("{\"")
