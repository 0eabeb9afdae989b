rule convert:
    input:
        settings=current_settings,
        events=ROLLOUT + "/events.jsonl",
        harness=ROLLOUT + "/harness.json",
        calls=ROLLOUT + "/model_calls.jsonl",
    output:
        response=ROLLOUT + "/response.json",
        trajectory=ROLLOUT + "/trajectory.json",
    log:
        ROLLOUT + "/logs/convert.log",
    resources:
        attempt=attempt,
    retries: CFG.retries
    group: "rollout"
    priority: 3
    shell:
        step_command("convert")
