"""Build time per image, grading time per row, and the grading defences' overhead on the
real suites of the corpus (corpus/README.md).

    python benchmarks/corpus.py [ROW ...] [--fresh] [--workdir DIR]

Builds each row's image (--fresh: again, with no cached layer, as on a fresh machine;
otherwise only the images the engine lacks are built and timed), then runs the corpus
check (sandbatch.corpus.check: four real Snakemake runs on Docker, gold and comment-only
patches, defences on and log_only) and prints per row: the build, the gold grade's step
time and its `tests` phase (apply, neutralise, run the suite, read and check the results)
with the defences on and off, and the added share. The overall figure is the sum over the
rows' gold grades (target: under 5 % of the test run). One run per mode: on a shared
machine a single suite's wall time swings by more than the difference, so read the sum.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sandbatch.corpus import rows
from sandbatch.corpus.build import build
from sandbatch.corpus.check import check

TARGET = 0.05


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("ids", nargs="*")
    ap.add_argument("--fresh", action="store_true", help="rebuild every image with no cached layer")
    ap.add_argument("--workdir", type=Path)
    args = ap.parse_args()
    built = {r.id: build(r, fresh=args.fresh)[1] for r in rows(args.ids or None)}
    res = check(args.ids or None, args.workdir)
    print(f"{'row':<28} {'build s':>8} {'grade s on/off':>15} {'tests s on/off':>15} {'added':>7}")
    on_sum = off_sum = 0.0
    for rid, by_mode in res["grades"].items():
        on, off = by_mode["neutralise"]["gold"], by_mode["log_only"]["gold"]
        on_sum, off_sum = on_sum + on["tests_s"], off_sum + off["tests_s"]
        b = built[rid]
        print(f"{rid:<28} {'present' if b is None else f'{b:.0f}':>8} {on['grade_s']:>7.1f}/{off['grade_s']:<7.1f} "
              f"{on['tests_s']:>7.1f}/{off['tests_s']:<7.1f} {(on['tests_s'] - off['tests_s']) / off['tests_s']:>+7.1%}")
    share = (on_sum - off_sum) / off_sum
    print(f"all gold grades: tests {on_sum:.1f} s with the defences, {off_sum:.1f} s without: {share:+.1%} "
          f"(target < {TARGET:.0%}: {'met' if share < TARGET else 'not met'})")
    gold = sum(g["neutralise"]["gold"]["resolved"] for g in res["grades"].values())
    noop = sum(g["neutralise"]["noop"]["resolved"] for g in res["grades"].values())
    print(f"gold resolved {gold}/{len(res['grades'])}, no-op resolved {noop}/{len(res['grades'])}, "
          f"graded wrong: {len(res['wrong'])}")
    for w in res["wrong"]:
        print(f"WRONG: {w}")
    return 1 if res["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
