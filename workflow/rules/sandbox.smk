rule sandbox:
    input:
        settings=ancient(RUN_SETTINGS),
    output:
        ROLLOUT + "/sandbox.json",
    log:
        ROLLOUT + "/logs/sandbox.log",
    resources:
        attempt=attempt,
        sandboxes=1,
    retries: CFG.retries
    group: "rollout"
    priority: 1
    shell:
        step_command("sandbox")
