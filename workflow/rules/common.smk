# Config validation, the task table, paths and the command line of every step.
import atexit
import shlex
import sys
import time

from sandbatch.ops.owners import register as register_owner, unregister as unregister_owner
from sandbatch.steps.forkserver import StepServer, executor_on_command_line
from sandbatch.ops.workflow import (end_summary, exit_if_graded_nothing, load_run, preflight_or_exit, reaped_since,
                                    recover_before_run, sandboxes_at_once, stamps, start_run_settings,
                                    write_run_settings)

STARTED = time.time()  # this invocation's start: what its aggregate wrote is newer
CFG, CFG_RAW, TASKS = load_run(workflow, config)
STEP_SERVER = StepServer()
# A remote job's Snakemake that runs the rollout's steps itself (a Slurm job's inner one:
# --mode remote, no --executor, so the local executor) runs no hooks (--no-hooks): it
# starts a step server of its own here, for the steps of its job, and stops it when it
# exits. (The executor is chosen after the Snakefile is read: its command line tells.)
if workflow.remote_exec and not workflow.dryrun and executor_on_command_line(sys.argv) in (None, "local"):
    STEP_SERVER.start(CFG)
    atexit.register(STEP_SERVER.stop)
STAMPS = stamps(CFG_RAW, (f"{t.id}/{r}" for t in TASKS for r in range(CFG.repeats)))
RUN_DIR = str(CFG.run_dir)
ROLLOUT = RUN_DIR + "/{task}/{repeat}"
SETTINGS = RUN_DIR + "/_settings"
RUN_SETTINGS = SETTINGS + "/run.json"
MAX_ATTEMPTS = CFG.retries + 1
PYTHON = shlex.quote(sys.executable)
SCRIPTS = os.path.join(workflow.basedir, "workflow", "scripts")


# `concurrency` x `nodes` caps the jobs that hold a sandbox, locally and on Slurm
# (--resources sandboxes=N on the command line wins); lowered to what this host's open-files
# and process limits hold (sandbatch.ops.capacity): more rollouts wait, none fails
if "sandboxes" not in workflow.global_resources:
    workflow.register_resource("sandboxes", sandboxes_at_once(CFG, spawned=workflow.remote_exec
                                                              or workflow.subprocess_exec))


wildcard_constraints:
    task=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    repeat=r"\d+",


def rollout_files(name):
    return [f"{RUN_DIR}/{t.id}/{r}/{name}" for t in TASKS for r in range(CFG.repeats)]


def get_final_outputs():
    """The run's summary files, and every rollout's final records: naming those too means a
    deleted grade.json, response.json or trajectory.json is redone even though the summary is newer."""
    summary = list(rules.aggregate.output)  # every output: a missing plot is redone too
    if CFG.aggregate.compare_to:
        summary += list(rules.compare_runs.output)
    if "gym" in CFG.aggregate.exports:
        summary += list(rules.export_gym.output)
    return summary + rollout_files("grade.json") + rollout_files("response.json") + rollout_files("trajectory.json")


def final_outputs_after_recovery(wildcards):
    """Input function of the default target `all`, and the explicit recovery point after a crash
    (stale locks, half-written outputs; see sandbatch.ops.workflow.recover_before_run): only a run
    that executes jobs gets there, never `-n`, `--touch`, `--unlock` or `--report`."""
    recover_before_run(workflow)
    write_run_settings(workflow, RUN_SETTINGS, STAMPS["run"])
    return get_final_outputs()


def current_settings(wildcards):
    """Input function of every step: no input file, but _settings/run.json, which the step reads,
    holds the config as it is now before any job runs, whatever the target (see
    sandbatch.ops.workflow.write_run_settings)."""
    write_run_settings(workflow, RUN_SETTINGS, STAMPS["run"])
    return []


def step_command(step):
    """The shell command of a per-rollout step (`shell:` keeps a job at ~30 ms of overhead)."""
    script = shlex.quote(os.path.join(SCRIPTS, f"{step}.py"))
    return (
        f"{PYTHON} {script} --config {shlex.quote(RUN_SETTINGS)} --task {{wildcards.task}} "
        f"--repeat {{wildcards.repeat}} --attempt {{resources.attempt}} --max-attempts {MAX_ATTEMPTS} "
        f"2>> {{log}}"
    )


def attempt(wildcards, attempt):
    return attempt


# Stage settings files: written only when their content changes (params rerun trigger), so a
# stage and what follows it rerun exactly when its own settings change (ops.workflow.stamps).
rule settings:
    output:
        SETTINGS + "/{stage}.json",
    params:
        content=lambda wc: STAMPS[wc.stage],
    wildcard_constraints:
        stage="agent|grade|aggregate",
    localrule: True
    shell:
        "printf '%s\\n' {params.content:q} > {output}"


def reap_at_exit():
    from sandbatch.ops.rerun import lost_note, reap_and_forget

    if reaped_since(RUN_DIR, STARTED):  # this invocation's aggregate reaped after the last rollout
        return
    try:
        deleted, lost = reap_and_forget(CFG)
    except Exception as exc:  # never mask the run's own outcome
        print(f"sandbatch: reaping the sandboxes of run {CFG.run} failed: {exc}", file=sys.stderr)
        return
    if deleted:
        print(f"sandbatch: reaped {len(deleted)} sandbox(es) left by run {CFG.run}", file=sys.stderr)
    if lost:
        print(lost_note(lost), file=sys.stderr)


def claim_instance():
    """The run instance's identity (sandbatch.core.instance), made once per working directory and run
    before any job starts: its sandboxes carry it, and reaping selects by it."""
    from sandbatch.core.instance import claim

    _, note = claim(RUN_DIR)
    if note:
        print(note, file=sys.stderr)


def finish_run(success):
    """End of a real run, successful or not: release the owner record, delete leftovers, say
    how it went (the console's logger prints the summary last; sandbatch.ops.console)."""
    from snakemake.logging import logger
    from sandbatch.ops.console import SUMMARY

    STEP_SERVER.stop()
    unregister_owner()
    reap_at_exit()
    lines = end_summary(CFG, STARTED, success)
    if lines:
        logger.info("\n".join(lines), extra={SUMMARY: True})


# A real run first checks what it needs from outside (sandbatch.ops.workflow.preflight: the
# model endpoint, the sandbox service, the images); a plan (-n) does not. Owner record of a real run (see sandbatch.ops.owners): `sandbatch stop` and `sandbatch status`
# find the run's Snakemake by it, and the next run tells stale locks from live ones.
# Local runs get a step server (sandbatch.steps.forkserver): each step job then costs a
# fork instead of a Python start-up with every import.
onstart:
    preflight_or_exit(CFG)
    start_run_settings()
    register_owner(CFG.run)
    claim_instance()
    if workflow.local_exec and not workflow.touch:
        STEP_SERVER.start(CFG)
