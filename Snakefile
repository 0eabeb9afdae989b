# sandbatch: evaluate a coding agent on a benchmark, one rollout per (task, repeat).
#   snakemake --cores 4                                   # the embedded default (config/default.yaml)
#   snakemake --cores 4 --configfile config/<file>.yaml   # another benchmark / harness / model
# The chain per rollout: sandbox -> harness -> convert -> patch -> grade; then aggregate.
import os

from snakemake.utils import min_version

min_version("9.0")

configfile: os.path.join(workflow.basedir, "config", "default.yaml")
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/sandbox.smk"
include: "workflow/rules/harness.smk"
include: "workflow/rules/convert.smk"
include: "workflow/rules/patch.smk"
include: "workflow/rules/grade.smk"
include: "workflow/rules/aggregate.smk"


rule all:
    input:
        final_outputs_after_recovery,
    default_target: True


# Whatever a run leaves behind (killed jobs, failed deletes) is deleted by label at the end,
# successful or not. A run whose every rollout ended in an infrastructure error fails then.
onsuccess:
    finish_run(success=True)
    exit_if_graded_nothing(CFG)


onerror:
    finish_run(success=False)
