# Reruns when the patch or the grading settings change, never the agent.
rule grade:
    input:
        settings=current_settings,
        stamp=SETTINGS + "/grade.json",
        patch=ROLLOUT + "/patch.diff",
        info=ROLLOUT + "/patch.json",
    output:
        ROLLOUT + "/grade.json",
    log:
        ROLLOUT + "/logs/grade.log",
    resources:
        attempt=attempt,
        sandboxes=1,
    retries: CFG.retries
    group: "rollout"
    priority: 5
    shell:
        step_command("grade")
