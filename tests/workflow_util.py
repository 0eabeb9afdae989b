"""Running the real workflow in a temporary directory, as a user would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SMOKE_TASKS = REPO / "data" / "smoke" / "tasks.jsonl"


def snakemake(workdir: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`snakemake -s <repo>/Snakefile -d <workdir> --cores 2 ...` in a subprocess."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir),
           "--cores", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=workdir)


def write_config(workdir: Path, name: str, data: dict) -> Path:
    path = workdir / name
    path.write_text(json.dumps(data))  # JSON is YAML
    return path


def rollouts(workdir: Path, run: str = "default") -> list[dict]:
    path = workdir / "results" / run / "rollouts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def metrics(workdir: Path, run: str = "default") -> dict:
    return json.loads((workdir / "results" / run / "metrics.json").read_text())


def mtimes(workdir: Path, pattern: str, run: str = "default") -> dict[str, int]:
    return {str(p.relative_to(workdir)): p.stat().st_mtime_ns
            for p in sorted((workdir / "results" / run).glob(pattern))}
