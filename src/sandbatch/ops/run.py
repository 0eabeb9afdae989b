"""`sandbatch run`: the workflow in one command. The config is merged (the embedded default,
config files, the flags of the common case, `--set KEY.PATH=VALUE`), checked, written into
the run's directory, and the real Snakemake runs it as a subprocess; its profile, `--cores`,
`--jobs` and executor options pass through. The run's summary is printed last, by the same
function as at the end of a `snakemake` run (sandbatch.ops.workflow.end_summary)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..core import resources
from ..core.config import merge, merged_sources, nest_dotted, parse, validate
from ..core.errors import UserError
from ..core.util import write_if_changed
from .workflow import SUMMARY_BY_CALLER, check_run, end_summary

RESOLVED = "config.yaml"  # the run's merged config, in results/<run>/
INTERRUPTED_EXIT = 130  # a shell's exit status after Ctrl-C

# the config-free form: flag -> the config key it sets (documented in docs/running.md)
FLAGS: dict[str, str] = {
    "run": "run",
    "benchmark": "benchmark.kind",
    "tasks": "benchmark.tasks",
    "limit": "benchmark.limit",
    "repeats": "repeats",
    "harness": "harness.name",
    "model": "model.name",
    "base_url": "model.base_url",
    "provider": "sandbox.provider",
    "concurrency": "concurrency",
}


@dataclass
class RunRequest:
    configfiles: list[Path] = field(default_factory=list)
    flags: dict[str, Any] = field(default_factory=dict)  # FLAGS' names -> values given
    sets: dict[str, Any] = field(default_factory=dict)  # nested, from --set
    snakemake_args: list[str] = field(default_factory=list)


def _flag_overrides(flags: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """The config-free flags as a config; a benchmark given without --tasks reads its tasks
    where `sandbatch fetch-tasks` writes them (the embedded default's for smoke)."""
    given = {k: v for k, v in flags.items() if v is not None}
    if "benchmark" in given:
        from ..tasks import catalog

        try:
            bench = catalog.get(given["benchmark"])
        except UserError as e:
            raise UserError(f"--benchmark: {e}") from None
        given["benchmark"] = bench.name
        if "tasks" not in given and bench.name != (base.get("benchmark") or {}).get("kind"):
            given["tasks"] = bench.out
    return nest_dotted({FLAGS[k]: v for k, v in given.items()})


def resolve(req: RunRequest) -> tuple[dict[str, Any], Any]:
    """The merged, validated config (with the schema's defaults filled in) and its typed form;
    a mistake is one UserError naming the file or flag and the key."""
    merged, sources = merged_sources([resources.config_file(c) for c in req.configfiles],
                                     default=resources.default_config())
    layers = (("flags", _flag_overrides(req.flags, merged)), ("--set", req.sets))
    sources += [(label, layer) for label, layer in layers if layer]
    merged = merge(sources)
    cfg, _ = check_run(parse(merged, sources))
    return validate(merged, sources), cfg


def write_resolved(resolved: dict[str, Any], cfg, path: Path | None = None) -> Path:
    """results/<run>/config.yaml (or `path`), rewritten only when it changes (a rerun leaves it
    as it was)."""
    path = path or Path(cfg.results_dir) / cfg.run / RESOLVED
    text = ("# The merged config of this run, written by `sandbatch run`; run it again with\n"
            f"#   sandbatch run {path}    or    snakemake --configfile {path}\n"
            + yaml.safe_dump(resolved, sort_keys=False))
    write_if_changed(path, text)
    return path


def snakemake_command(config_path: Path, args: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(resources.snakefile()), "--configfile", str(config_path.resolve())]
    if not any(a == "--logger" or a.startswith("--logger=") for a in args):
        cmd += ["--logger", "sandbatch"]  # the short console, whatever profile the working directory has
    return cmd + args


def run(req: RunRequest) -> int:
    resolved, cfg = resolve(req)
    dry = any(a in ("-n", "--dry-run", "--dryrun") for a in req.snakemake_args)
    if dry:  # a plan creates nothing: its config goes to a temporary file
        with tempfile.TemporaryDirectory(prefix="sandbatch-plan-") as tmp:
            return _snakemake(write_resolved(resolved, cfg, Path(tmp) / RESOLVED), req.snakemake_args, cfg, dry)
    return _snakemake(write_resolved(resolved, cfg), req.snakemake_args, cfg, dry)


def _snakemake(path: Path, args: list[str], cfg, dry: bool) -> int:
    env = {**os.environ, SUMMARY_BY_CALLER: "1"}
    interrupted = []
    # Ctrl-C reaches Snakemake too (the terminal signals the whole process group): it stops
    # its jobs and says so in one line; this process waits for it and adds nothing.
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
    started = time.time()
    try:
        code = subprocess.Popen(snakemake_command(path, args), env=env).wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    if interrupted or code in (-signal.SIGINT, INTERRUPTED_EXIT):
        return INTERRUPTED_EXIT
    if not dry:
        # a failed run's reason is on the console already (a refused config, a failed step)
        for line in end_summary(cfg, started, code == 0, in_workflow=False):
            print(line, file=sys.stderr)
    return code
