rule aggregate:
    input:
        settings=ancient(RUN_SETTINGS),
        stamp=SETTINGS + "/aggregate.json",
        grades=rollout_files("grade.json"),
        responses=rollout_files("response.json"),
    output:
        rollouts=RUN_DIR + "/rollouts.jsonl",
        predictions=RUN_DIR + "/predictions.jsonl",
        metrics=RUN_DIR + "/metrics.json",
        report=RUN_DIR + "/report.md",
        manifest=RUN_DIR + "/manifest.json",
    log:
        RUN_DIR + "/logs/aggregate.log",
    localrule: True
    shell:
        f"{PYTHON} {shlex.quote(os.path.join(SCRIPTS, 'aggregate.py'))} --config {shlex.quote(RUN_SETTINGS)} 2> {{log}}"
