from sandbatch.rollout.export import GYM_DIR, GYM_FILES

# Outputs marked report(...) make up `snakemake --report report.html` (captions in workflow/report/).
rule aggregate:
    input:
        settings=current_settings,
        stamp=SETTINGS + "/aggregate.json",
        grades=rollout_files("grade.json"),
        responses=rollout_files("response.json"),
    output:
        rollouts=RUN_DIR + "/rollouts.jsonl",
        predictions=RUN_DIR + "/predictions.jsonl",
        metrics=RUN_DIR + "/metrics.json",
        report=RUN_DIR + "/report.md",
        manifest=RUN_DIR + "/manifest.json",
        metrics_html=report(RUN_DIR + "/report/metrics.html", caption="../report/metrics.rst", category="Metrics"),
        metrics_rst=RUN_DIR + "/report/metrics.rst",
        resolved_plot=report(RUN_DIR + "/report/resolved_by_repo.svg", caption="../report/resolved_by_repo.rst",
                             category="Plots"),
        durations_plot=report(RUN_DIR + "/report/durations.svg", caption="../report/durations.rst",
                              category="Plots"),
        tokens_plot=report(RUN_DIR + "/report/tokens.svg", caption="../report/tokens.rst", category="Plots"),
        failures_plot=report(RUN_DIR + "/report/failures.svg", caption="../report/failures.rst",
                             category="Plots"),
        # one report entry per page (task and repeat as columns); htmlindex would need --report x.zip
        view=report(directory(RUN_DIR + "/report/view"), patterns=["{page,index}.html", "rollouts/{task}/{repeat}.html"],
                    caption="../report/view.rst", category="Trajectories"),
    log:
        RUN_DIR + "/logs/aggregate.log",
    localrule: True
    # the step server's fork (no Python start-up, nothing to import) where there is one; the
    # rollouts are those of the DAG's own task list (sandbatch.ops.workflow.load_run), read again
    # by the step: no command line would hold 12,000 paths
    shell:
        f"{PYTHON} {shlex.quote(os.path.join(SCRIPTS, 'aggregate.py'))} --config {shlex.quote(RUN_SETTINGS)} "
        "2> {log}"

# aggregate.compare_to: this run against an earlier one, a page of the report
if CFG.aggregate.compare_to:

    rule compare_runs:
        input:
            rollouts=RUN_DIR + "/rollouts.jsonl",
            baseline=ancient(f"{CFG.results_dir}/{CFG.aggregate.compare_to}/rollouts.jsonl"),
        output:
            report(RUN_DIR + "/report/compare.html", caption="../report/compare.rst", category="Comparison"),
        log:
            RUN_DIR + "/logs/compare.log",
        localrule: True
        shell:
            f"{PYTHON} -m sandbatch.cli compare {shlex.quote(CFG.aggregate.compare_to)} {shlex.quote(CFG.run)} "
            f"--results-dir {shlex.quote(CFG.results_dir)} --html {{output}} > {{log}} 2>&1"

# aggregate.exports: the finished run in another tool's layout, as `sandbatch export` writes it
if "gym" in CFG.aggregate.exports:

    rule export_gym:
        input:
            stamp=SETTINGS + "/aggregate.json",
            rollouts=RUN_DIR + "/rollouts.jsonl",
        output:
            [f"{RUN_DIR}/{GYM_DIR}/{name}" for name in GYM_FILES],
        log:
            RUN_DIR + "/logs/export_gym.log",
        localrule: True
        shell:
            f"{PYTHON} -m sandbatch.cli export {shlex.quote(CFG.run)} --format gym "
            f"--results-dir {shlex.quote(CFG.results_dir)} > {{log}} 2>&1"
