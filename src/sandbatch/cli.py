"""`sandbatch`: what lives outside the DAG: validate a config, reap a run's sandboxes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from . import REPO_ROOT
from .errors import InfraError, UserError


def _overrides(pairs: list[str]) -> dict:
    """`key=value` pairs like Snakemake's --config (values parsed as YAML)."""
    out: dict = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"--config: {pair!r} is not key=value")
        out[key] = yaml.safe_load(value)
    return out


def cmd_validate(args: argparse.Namespace) -> int:
    from .config import load
    from .tasks import load_tasks
    from .workflow import check_registries

    default = REPO_ROOT / "config" / "default.yaml"
    cfg = load(args.configfile, _overrides(args.config), default=default if not args.no_default else None)
    check_registries(cfg)
    tasks = load_tasks(cfg.benchmark)
    yaml.safe_dump(cfg.model_dump(mode="json"), sys.stdout, sort_keys=False)
    print(f"# ok: {len(tasks)} tasks x {cfg.repeats} repeats = {len(tasks) * cfg.repeats} rollouts", file=sys.stderr)
    return 0


def _run_config(run: str, results_dir: str):
    """The validated config a run was started with (results/<run>/_settings/run.json)."""
    from .config import Config

    path = Path(results_dir) / run / "_settings" / "run.json"
    if not path.is_file():
        raise UserError(f"{path}: no such run; pass the run name of a started run (see results/)")
    return Config.model_validate_json(path.read_text(encoding="utf-8"))


def reap_run(cfg) -> list[str]:
    """Delete every sandbox labelled with the run (idempotent); returns the ids deleted."""
    import asyncio

    from .sandbox import get_provider
    from .sandbox.reaper import reap
    from .steps.sandbox import run_labels

    async def go() -> list[str]:
        async with get_provider(cfg.sandbox) as provider:
            return await reap(provider, run_labels(cfg))

    return asyncio.run(go())


def cmd_reap(args: argparse.Namespace) -> int:
    cfg = _run_config(args.run, args.results_dir)
    deleted = reap_run(cfg)
    print(f"reaped {len(deleted)} sandbox(es) of run {cfg.run} on {cfg.sandbox.provider}"
          + (f": {', '.join(deleted)}" if deleted else ""))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sandbatch", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("validate", help="print the merged, validated config (or the first error)")
    v.add_argument("configfile", nargs="*", type=Path, help="config files, merged in order over config/default.yaml")
    v.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE", help="overrides, as with snakemake")
    v.add_argument("--no-default", action="store_true", help="do not start from config/default.yaml")
    v.set_defaults(func=cmd_validate)
    r = sub.add_parser("reap", help="delete every sandbox a run left behind (by label; idempotent)")
    r.add_argument("--run", required=True, help="the run name (results/<run>/)")
    r.add_argument("--results-dir", default="results")
    r.set_defaults(func=cmd_reap)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UserError as exc:
        print(f"sandbatch: error: {exc}", file=sys.stderr)
        return 2
    except InfraError as exc:
        print(f"sandbatch: {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
