# Agent runs are the expensive part: only a missing output or an explicit --forcerun reruns
# them (every input is ancient, so neither config edits nor timestamps do).
rule harness:
    input:
        settings=ancient(RUN_SETTINGS),
        sandbox=ancient(ROLLOUT + "/sandbox.json"),
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
