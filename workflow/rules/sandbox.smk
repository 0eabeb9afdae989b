# Redone when the settings the agent run depends on change (_settings/agent.json), and with it
# the whole rollout.
rule sandbox:
    input:
        settings=current_settings,
        stamp=SETTINGS + "/agent.json",
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
