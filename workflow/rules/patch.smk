# Deletes the agent sandbox once the patch is out.
rule patch:
    input:
        settings=current_settings,
        sandbox=ancient(ROLLOUT + "/sandbox.json"),
        harness=ROLLOUT + "/harness.json",
    output:
        patch=ROLLOUT + "/patch.diff",
        info=ROLLOUT + "/patch.json",
    log:
        ROLLOUT + "/logs/patch.log",
    resources:
        attempt=attempt,
        sandboxes=1,
    retries: CFG.retries
    group: "rollout"
    priority: 4
    shell:
        step_command("patch")
