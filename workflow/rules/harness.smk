# Agent runs are the expensive part: only a missing output, a new sandbox (a changed
# _settings/agent.json or a missing sandbox.json redoes the sandbox step) or an explicit
# --forcerun reruns them; edits of other settings and of code do not.
rule harness:
    input:
        settings=current_settings,
        sandbox=ROLLOUT + "/sandbox.json",
    output:
        events=ROLLOUT + "/events.jsonl",
        harness=ROLLOUT + "/harness.json",
        calls=ROLLOUT + "/model_calls.jsonl",
    log:
        ROLLOUT + "/logs/harness.log",
    resources:
        attempt=attempt,
        sandboxes=1,
    retries: CFG.retries
    group: "rollout"
    priority: 2
    shell:
        step_command("harness")
