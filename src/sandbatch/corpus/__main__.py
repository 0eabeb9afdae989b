"""python -m sandbatch.corpus build|lists|tasks|check|new ... (corpus/README.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..core.errors import SandbatchError
from . import rows


def write_tasks(ids: list[str] | None, out: Path, which: str) -> int:
    """A SWE-bench task file of the rows, each on its image; `which`: gold (the row's patch) or noop."""
    selected = rows(ids)
    lines = [json.dumps(r.task(None if which == "gold" else r.data["noop_patch"])) for r in selected]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sandbatch.corpus")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the rows' images (those the engine lacks)")
    b.add_argument("ids", nargs="*")
    li = sub.add_parser("lists", help="compute FAIL_TO_PASS / PASS_TO_PASS with swebench's eval script and parser")
    li.add_argument("ids", nargs="*")
    t = sub.add_parser("tasks", help="write the rows as a SWE-bench task file on their images")
    t.add_argument("ids", nargs="*")
    t.add_argument("--out", required=True, type=Path)
    t.add_argument("--patch", choices=("gold", "noop"), default="gold")
    c = sub.add_parser("check", help="grade every row's gold and comment-only patch through the workflow on Docker")
    c.add_argument("ids", nargs="*")
    c.add_argument("--workdir")
    c.add_argument("--cores", type=int, default=2)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "build":
            from .build import build

            for row in rows(args.ids or None):
                tag, took = build(row)
                print(f"{row.id}\t{tag}\t{'present' if took is None else f'built in {took:.0f} s'}", flush=True)
        elif args.cmd == "lists":
            from .lists import compute

            for row in rows(args.ids or None):
                record = compute(row)
                (row.dir / "lists.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
                print(f"{row.id}\tFAIL_TO_PASS {record['counts']['FAIL_TO_PASS']}\t"
                      f"PASS_TO_PASS {record['counts']['PASS_TO_PASS']}", flush=True)
        elif args.cmd == "tasks":
            print(f"wrote {write_tasks(args.ids or None, args.out, args.patch)} rows to {args.out}")
        else:
            from .check import main_args

            return main_args(args)
    except SandbatchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
