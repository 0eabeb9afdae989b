"""`sandbatch`: what lives outside the DAG (validate configs, and later status, reap, stop)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from . import REPO_ROOT
from .errors import UserError


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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sandbatch", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("validate", help="print the merged, validated config (or the first error)")
    v.add_argument("configfile", nargs="*", type=Path, help="config files, merged in order over config/default.yaml")
    v.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE", help="overrides, as with snakemake")
    v.add_argument("--no-default", action="store_true", help="do not start from config/default.yaml")
    v.set_defaults(func=cmd_validate)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UserError as exc:
        print(f"sandbatch: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
