"""The DAG's steps: one module per step, each called by a thin script in workflow/scripts/, and
the step server. May import every part package, rollout and reporting; never ops or cli.

Kept free of imports: the step scripts import this package first, and a script whose work
goes to the step server (sandbatch.steps.forkserver) must start in milliseconds.
"""

# step name -> "module:class"
STEPS: dict[str, str] = {
    "sandbox": "sandbatch.steps.sandbox:SandboxStep",
    "harness": "sandbatch.steps.harness:HarnessStep",
    "convert": "sandbatch.steps.convert:ConvertStep",
    "patch": "sandbatch.steps.patch:PatchStep",
    "grade": "sandbatch.steps.grade:GradeStep",
}


# the run's own step (one job per run, after every rollout): a command line of its own
RUN_STEPS: dict[str, str] = {"aggregate": "sandbatch.steps.aggregate"}


def run_here(step: str, argv: list[str] | None = None) -> int:
    """Run a step in this process (the step server's children call this too)."""
    import importlib

    if step in RUN_STEPS:
        return importlib.import_module(RUN_STEPS[step]).main(argv)
    from .common import main

    module, _, cls = STEPS[step].partition(":")
    return main(getattr(importlib.import_module(module), cls), argv)
