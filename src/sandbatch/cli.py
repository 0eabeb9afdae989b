"""`sandbatch`: what lives outside the DAG: validate configs, list benchmarks, fetch task files,
the paths of the packaged workflow and configs; status, stop, rerun-errors, reap, view, export
of a run; compare two runs."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

from . import __version__
from .core import resources
from .core.errors import InfraError, UserError, error_lines


def _overrides(pairs: list[str], flag: str = "--config") -> dict:
    """`key=value` pairs like Snakemake's --config (values parsed as YAML); a dotted key names
    a nested one (`harness.name=none`)."""
    from .core.config import nest_dotted

    out: dict = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or "" in key.split("."):
            raise UserError(f"{flag}: {pair!r} is not KEY=VALUE or KEY.PATH=VALUE; e.g. {flag} harness.name=none")
        try:
            out[key] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise UserError(f"{flag}: the value of {pair!r} is not valid YAML; quote it") from None
    return nest_dotted(out)


def cmd_run(args: argparse.Namespace) -> int:
    from .ops.run import FLAGS, RunRequest, run

    passthrough = list(args.snakemake_args)
    for flag, value in (("--cores", args.cores), ("--jobs", args.jobs), ("--profile", args.profile),
                        ("--executor", args.executor)):
        if value is not None:
            passthrough += [flag, str(value)]
    if args.dry_run:
        passthrough.append("--dry-run")
    req = RunRequest(configfiles=args.configfile, flags={k: getattr(args, k) for k in FLAGS},
                     sets=_overrides(args.set, "--set"), snakemake_args=passthrough)
    return run(req)


def cmd_validate(args: argparse.Namespace) -> int:
    from .core.config import merged_sources, parse
    from .core.endpoint import unknown_fields
    from .harness import get_harness
    from .tasks import load_tasks
    from .ops.workflow import check_images, check_run, located, preflight, resolve_model

    default = resources.default_config()
    merged, sources = merged_sources([resources.config_file(c) for c in args.configfile], _overrides(args.config),
                                     default=default if not args.no_default else None)
    cfg, _ = check_run(parse(merged, sources), sources)
    try:
        tasks = load_tasks(cfg.benchmark)
        check_images(cfg, lambda: tasks)
        cfg = resolve_model(cfg)[0]
    except UserError as exc:
        raise located(exc, sources, cfg) from None
    if args.preflight:
        preflight(cfg, tasks, sources)
    yaml.safe_dump(cfg.model_dump(mode="json"), sys.stdout, sort_keys=False)
    for name in unknown_fields(cfg.model):
        print(f"# note: {name} is not a request field known here; it is sent as it is", file=sys.stderr)
    print(f"# ok: {len(tasks)} tasks x {cfg.repeats} repeats = {len(tasks) * cfg.repeats} rollouts"
          + ("; the model endpoint, the sandbox service and the images answer" if args.preflight else ""),
          file=sys.stderr)
    harness = get_harness(cfg.harness.name)
    if harness.needs_model and cfg.model.proxy.enabled and not harness.model_on_host(harness.options_of(cfg.harness.config)):
        from .sandbox import proxy_address

        advertise = proxy_address(cfg.sandbox, cfg.model.proxy)[1]
        print(f"# the sandboxes reach the model proxy at {advertise}", file=sys.stderr)
    return 0


def cmd_fetch_tasks(args: argparse.Namespace) -> int:
    from .tasks.fetch import fetch_tasks

    path, n = fetch_tasks(args.benchmark, args.out, dataset=args.dataset, split=args.split, revision=args.revision,
                          git=args.git, git_ref=args.git_ref, force=args.force)
    print(f"wrote {n} {args.benchmark} tasks to {path}")
    return 0


def cmd_benchmarks(args: argparse.Namespace) -> int:
    from .tasks import catalog

    rows = [catalog.describe(b) for b in catalog.CATALOG.values()]
    print(catalog.as_json(rows) if args.json else catalog.render(rows), end="\n" if args.json else "")
    return 0


def cmd_path(args: argparse.Namespace) -> int:
    named = {"root": resources.root, "snakefile": resources.snakefile, "configs": lambda: resources.resource("config"),
             "profiles": lambda: resources.resource("profiles"), "schemas": lambda: resources.resource("schemas")}
    print(named[args.what]() if args.what in named else resources.config_file(args.what, must_exist=True))
    return 0


def cmd_reap(args: argparse.Namespace) -> int:
    from .core.config import run_config
    from .ops.rerun import lost_note, reap_and_forget

    cfg = run_config(args.run, args.results_dir)
    deleted, lost = reap_and_forget(cfg)
    print(f"reaped {len(deleted)} sandbox(es) of run {cfg.run} on {cfg.sandbox.provider}"
          + (f": {', '.join(deleted)}" if deleted else ""))
    if lost:
        print(lost_note(lost).removeprefix("sandbatch: "))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    import json

    from .ops.status import collect, render

    st = collect(args.run, args.results_dir, args.directory)
    if args.json:
        print(json.dumps(st.as_dict(), indent=2))
    else:
        sys.stdout.write(render(st))
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from .ops.stop import stop

    rep = stop(args.run, args.results_dir, args.directory, grace=args.grace, reap=not args.no_reap)
    for note in rep.notes:
        print(f"sandbatch: {note}", file=sys.stderr)
    if rep.pids:
        print(f"stopped Snakemake pid {', '.join(map(str, rep.pids))} by {rep.method} in {rep.seconds} s"
              + (f" ({rep.killed} process(es) needed SIGKILL)" if rep.killed else ""))
    else:
        print(f"no Snakemake of run {args.run!r} is running in {Path(args.directory).resolve()}")
    if rep.locks_removed:
        print("removed .snakemake/locks")
    if not args.no_reap:
        print(f"deleted {len(rep.sandboxes_deleted)} sandbox(es) of run {args.run!r}")
    return 0


def cmd_rerun_errors(args: argparse.Namespace) -> int:
    from .ops.rerun import rerun_errors

    items = rerun_errors(args.run, args.results_dir, args.directory, args.failure_class or None, args.dry_run)
    verb = "would redo" if args.dry_run else "will redo"
    for it in items:
        print(f"{it.rollout}: {it.failed_phase} failed [{it.failure_class}]; {verb} from {it.restart} "
              f"(deleted: {', '.join(it.deleted) or 'nothing'})")
    print(f"{len(items)} rollout(s) with infra_error" + ("" if args.dry_run or not items else
          "; now run the same snakemake command again"))
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    from .core.config import run_config
    from .reporting.view import VIEW_DIR, build, finished_rows

    # where the run's aggregate writes it: one viewer per run, brought up to date mid-run
    out = (args.output or Path(args.directory) / args.results_dir / args.run / VIEW_DIR).resolve()
    os.chdir(args.directory)  # the run's config names paths relative to its working directory
    cfg = run_config(args.run, args.results_dir)
    rows = finished_rows(cfg)
    index = build(cfg, rows, out)
    print(f"{len(rows)} rollout(s); open {index.resolve().as_uri()}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    import json

    from .reporting.compare import compare, html, load_run, render

    base = Path(args.directory) / args.results_dir
    c = compare(load_run(base / args.run_a), load_run(base / args.run_b), args.bootstrap, args.seed)
    if args.html:
        from .core.util import write_atomic

        write_atomic(args.html, html(c))
    if args.json:
        print(json.dumps(c, indent=2))
    else:
        sys.stdout.write(render(c))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from .core.config import run_config
    from .contracts.row import read_rows
    from .rollout.export import export

    os.chdir(args.directory)  # the run's config names paths relative to its working directory
    cfg = run_config(args.run, args.results_dir)
    rows_path = cfg.run_dir / "rollouts.jsonl"
    if not rows_path.is_file():
        raise UserError(f"{rows_path}: not found; export needs a finished run (its aggregate step writes it)")
    out = export(cfg, args.format, read_rows(rows_path))
    print(f"wrote {args.format} export of run {cfg.run} to {out}")
    return 0


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="the run name (results/<run>/)")
    p.add_argument("--results-dir", default="results", help="directory holding <run>/ (default: results)")
    p.add_argument("-d", "--directory", default=".", type=Path,
                   help="the working directory of the run (default: the current one)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sandbatch", description=__doc__)
    p.add_argument("--version", action="version", version=f"sandbatch {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    u = sub.add_parser("run", help="run the workflow: the embedded default, config files, or the flags below",
                       description="Merge config/default.yaml, the CONFIG files in order, the flags and --set; "
                       "write the result to results/<run>/config.yaml; run Snakemake on it. Options Snakemake "
                       "takes (and everything after --) pass through to it.")
    u.add_argument("configfile", nargs="*", type=Path, metavar="CONFIG", help="config files, merged in order")
    u.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override one key (value parsed as YAML), e.g. --set model.sampling.temperature=0.6")
    for flag, key, hint in (("--run", "run", "NAME"), ("--benchmark", "benchmark.kind", "KIND"),
                            ("--tasks", "benchmark.tasks", "PATH"), ("--limit", "benchmark.limit", "N"),
                            ("--repeats", "repeats", "N"), ("--harness", "harness.name", "NAME"),
                            ("--model", "model.name", "NAME"), ("--base-url", "model.base_url", "URL"),
                            ("--provider", "sandbox.provider", "NAME"), ("--concurrency", "concurrency", "N")):
        u.add_argument(flag, metavar=hint, type=int if hint == "N" else str, help=f"sets {key}")
    u.add_argument("-c", "--cores", help="Snakemake's --cores (default: the profile's)")
    u.add_argument("-j", "--jobs", help="Snakemake's --jobs")
    u.add_argument("--profile", help="Snakemake's --profile (e.g. profiles/slurm)")
    u.add_argument("--executor", help="Snakemake's --executor (e.g. slurm)")
    u.add_argument("-n", "--dry-run", action="store_true", help="plan only: list the jobs Snakemake would run")
    u.set_defaults(func=cmd_run, snakemake_args=[])
    v = sub.add_parser("validate", help="print the merged, validated config (or the first error)")
    v.add_argument("configfile", nargs="*", help="config files, merged in order over config/default.yaml; a "
                   "shipped one also by name (swe_verified, config/xs_swe_pro.yaml: `sandbatch path configs`)")
    v.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE",
                   help="overrides, as with snakemake; a dotted KEY.PATH=VALUE sets a nested key")
    v.add_argument("--no-default", action="store_true", help="do not start from config/default.yaml")
    v.add_argument("--preflight", action="store_true",
                   help="also ask what a run asks before it starts: the model endpoint serves model.name, the "
                        "sandbox service answers, every image is there or pullable (creates nothing)")
    v.set_defaults(func=cmd_validate)
    b = sub.add_parser("benchmarks", help="the benchmarks sandbatch knows: source, size, images, present here")
    b.add_argument("--json", action="store_true", help="print JSON for machines")
    b.set_defaults(func=cmd_benchmarks)
    a = sub.add_parser("path", help="print where the packaged Snakefile, configs, profiles or schemas are")
    a.add_argument("what", nargs="?", default="root", metavar="WHAT",
                   help="root (default), snakefile, configs, profiles, schemas, or a shipped config's name: "
                        'snakemake -s "$(sandbatch path snakefile)" --configfile "$(sandbatch path swe_verified)"')
    a.set_defaults(func=cmd_path)
    f = sub.add_parser("fetch-tasks", help="write a benchmark's task file from its public dataset / repository")
    f.add_argument("benchmark", help="a name `sandbatch benchmarks` lists: smoke, swebench (Verified), "
                   "swebench_multilingual, swebench_pro or terminal_bench")
    f.add_argument("--out", help="where to write (default: the path config/<benchmark>.yaml and the profiles name)")
    f.add_argument("--dataset", help="Hugging Face dataset id or a local dataset directory (default: the public one)")
    f.add_argument("--split", default="test", help="dataset split (default: test)")
    f.add_argument("--revision", help="dataset revision (branch, tag or commit)")
    f.add_argument("--git", help="git repository of Pro's run_scripts/ or of Terminal-Bench's task directories")
    f.add_argument("--git-ref", help="branch or tag of that repository")
    f.add_argument("--force", action="store_true", help="replace an existing task file or directory")
    f.set_defaults(func=cmd_fetch_tasks)
    r = sub.add_parser("reap", help="delete every sandbox a run left behind (by label; idempotent)")
    r.add_argument("--run", required=True, help="the run name (results/<run>/)")
    r.add_argument("--results-dir", default="results")
    r.set_defaults(func=cmd_reap)
    s = sub.add_parser("status", help="progress of a run: steps, resolved so far, failures, ETA")
    _run_args(s)
    s.add_argument("--json", action="store_true", help="print JSON for machines")
    s.set_defaults(func=cmd_status)
    t = sub.add_parser("stop", help="stop a run's Snakemake (bounded), unlock, delete its sandboxes")
    _run_args(t)
    t.add_argument("--grace", type=float, default=20.0,
                   help="seconds to wait after SIGINT before SIGKILL (default 20)")
    t.add_argument("--no-reap", action="store_true", help="keep the run's sandboxes")
    t.set_defaults(func=cmd_stop)
    r = sub.add_parser("rerun-errors", help="delete the records of infra_error rollouts so the next run redoes them")
    _run_args(r)
    r.add_argument("--class", dest="failure_class", action="append", metavar="FAILURE_CLASS",
                   help="only rollouts of this failure class (repeatable)")
    r.add_argument("-n", "--dry-run", action="store_true", help="list, delete nothing")
    r.set_defaults(func=cmd_rerun_errors)
    w = sub.add_parser("view", help="write the static trajectory viewer of a run (index + one page per rollout)")
    _run_args(w)
    w.add_argument("-o", "--output", type=Path, help="directory to write (default: results/<run>/report/view, "
                   "where the run writes it)")
    w.set_defaults(func=cmd_view)
    e = sub.add_parser("export", help="write a finished run in another tool's layout (gym: NeMo Gym's rollouts)")
    _run_args(e)
    e.add_argument("--format", required=True, help="gym: `gym eval run`'s rollouts.jsonl and "
                   "materialised inputs, in results/<run>/gym/")
    e.set_defaults(func=cmd_export)
    c = sub.add_parser("compare", help="paired comparison of two finished runs on the same tasks (B against A)")
    c.add_argument("run_a", metavar="RUN_A", help="the baseline run (results/<run>/)")
    c.add_argument("run_b", metavar="RUN_B", help="the run compared with it")
    c.add_argument("--results-dir", default="results", help="directory holding both runs (default: results)")
    c.add_argument("-d", "--directory", default=".", type=Path, help="the working directory (default: the current one)")
    c.add_argument("--json", action="store_true", help="print JSON for machines")
    c.add_argument("--html", type=Path, metavar="FILE", help="also write the comparison as an HTML page")
    c.add_argument("--bootstrap", type=int, default=2000, metavar="N", help="bootstrap resamples (default 2000)")
    c.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    c.set_defaults(func=cmd_compare)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = argv[argv.index("--") + 1:] if "--" in argv else []
    args, unknown = parser.parse_known_args(argv[:len(argv) - len(rest) - (1 if "--" in argv else 0)])
    if (unknown or rest) and args.command != "run":
        parser.error(f"unrecognized arguments: {' '.join(unknown + rest)}")
    if unknown or rest:  # Snakemake's own options, and everything after `--`, pass through
        args.snakemake_args = unknown + rest
    try:
        return args.func(args)
    except UserError as exc:
        print(*error_lines(exc), sep="\n", file=sys.stderr)
        return 2
    except InfraError as exc:
        print(f"sandbatch: {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
