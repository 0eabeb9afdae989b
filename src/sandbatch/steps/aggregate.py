"""Step 6: every rollout's records -> rollouts.jsonl, predictions, metrics.json, report.md, manifest.json."""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from ..core.config import Config
from ..core.errors import InfraError, UserError
from ..contracts.files import MANIFEST
from ..core.util import write_atomic, write_json, write_jsonl
from ..reporting import metrics, plots, report, view
from ..contracts.records import PATCH, Manifest, now
from ..contracts.row import RolloutRow, write_rows
from ..rollout.rows import rollout_row
from ..sandbox.reaper import reap_run
from ..tasks import TaskRef, select_tasks


def rollouts_of(cfg: Config, grades: list[str] | None) -> list[tuple[TaskRef, int]]:
    """(task, repeat) of every rollout to aggregate: those whose grade.json the workflow hands
    over (the aggregate's inputs: one definition of the run, the DAG's), in that order; by hand
    without --inputs, every rollout the config selects."""
    refs = {t.id: t for t in select_tasks(cfg.benchmark)}  # the rows' metadata (instance id, repo)
    if grades is None:
        return [(t, r) for t in refs.values() for r in range(cfg.repeats)]
    out = []
    for path in grades:
        d = Path(path).parent
        task = refs.get(d.parent.name)
        if task is None or not d.name.isdigit():
            raise UserError(f"{path}: not a grade.json of a task of this run ({cfg.run_dir}/<task>/<repeat>/)")
        out.append((task, int(d.name)))
    return out


def run(cfg: Config, cfg_raw: dict[str, Any], grades: list[str] | None = None) -> None:
    # every rollout is graded: a sandbox of this run still alive belongs to a killed job. The
    # provider's list call waits on the provider, so it goes on while the files are written
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        reaping = pool.submit(reap_run, cfg)
        rows = write_summary(cfg, grades)
        try:
            reaped: list[str] | None = reaping.result()
        except InfraError as exc:  # a provider hiccup must not hide the results; `sandbatch stop` reaps too
            print(f"sandbatch: aggregate: could not reap leftover sandboxes: {exc}", file=sys.stderr)
            reaped = None
    starts = [r.started_at for r in rows if r.started_at]
    write_json(cfg.run_dir / MANIFEST, Manifest(
        run=cfg.run, config=cfg_raw, started_at=min(starts) if starts else None, finished_at=now(),
        sandboxes_reaped=None if reaped is None else len(reaped), python=sys.version.split()[0],
        platform=platform.platform(), versions=_versions(),
    ).model_dump(mode="json"))


def write_summary(cfg: Config, grades: list[str] | None) -> list[RolloutRow]:
    """rollouts.jsonl, predictions, metrics, the report and its pages: the rows."""
    rollouts = rollouts_of(cfg, grades)
    rows = [rollout_row(cfg, t, r) for t, r in rollouts]
    out = cfg.run_dir
    write_rows(out / "rollouts.jsonl", rows)
    repeats = sorted({r for _, r in rollouts})
    for stale in set(out.glob("predictions.r*.jsonl")) - {out / f"predictions.r{r}.jsonl" for r in repeats}:
        stale.unlink()  # of repeats the config no longer asks for
    for repeat in repeats:
        name = "predictions.jsonl" if repeat == 0 else f"predictions.r{repeat}.jsonl"
        write_jsonl(out / name, [
            {"instance_id": t.instance_id, "model_name_or_path": cfg.model.name,
             "model_patch": (out / t.id / str(repeat) / PATCH).read_bytes().decode("utf-8", "surrogateescape")}
            for t, r in rollouts if r == repeat])
    m = metrics.compute(rows, cfg.grading.reward_threshold, cfg.model.prices)
    write_json(out / "metrics.json", m.model_dump(mode="json"))
    write_atomic(out / "report.md", report.markdown(cfg, m, rows))
    # what `snakemake --report` shows: the metrics table and the plots (workflow/rules/aggregate.smk)
    svgs = {name: plot(rows) for name, plot in plots.PLOTS.items()}
    for name, svg in svgs.items():
        write_atomic(out / "report" / f"{name}.svg", svg)
    write_atomic(out / "report" / "metrics.html", report.html(cfg, m, rows, svgs))
    write_atomic(out / "report" / "metrics.rst", report.rst(cfg, m))
    view.build(cfg, rows, out / view.VIEW_DIR)
    return rows


def _versions() -> dict[str, str]:
    out = {}
    for pkg in ("sandbatch", "snakemake", "pydantic", "jsonschema", "PyYAML", "httpx", "opensandbox", "swebench"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def main(argv: list[str] | None = None, grades: list[str] | None = None) -> int:
    """The command line; `grades` (the workflow's job inputs) wins over --inputs."""
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True, type=Path)
    p.add_argument("--inputs", type=Path, help="a file listing the grade.json of every rollout to aggregate, "
                   "one a line ('-': standard input); default: every rollout the config selects")
    a = p.parse_args(argv)
    raw = json.loads(a.config.read_text(encoding="utf-8"))
    if grades is None and a.inputs is not None:
        text = sys.stdin.read() if str(a.inputs) == "-" else a.inputs.read_text(encoding="utf-8")
        grades = [line for line in text.splitlines() if line.strip()]
    try:
        run(Config.model_validate(raw), raw, grades)
    except UserError as exc:
        print(f"sandbatch: error: {exc}", file=sys.stderr)
        return 2
    return 0
