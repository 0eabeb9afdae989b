"""Workflow step 'aggregate' (see sandbatch.steps.aggregate); runs standalone too: --help.

Under Snakemake (`script:`) it aggregates exactly the job's grade.json inputs and writes its
messages to the job's log."""
import sys

from sandbatch.steps.aggregate import main

if "snakemake" in globals():
    with open(snakemake.log[0], "w", encoding="utf-8") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        sys.exit(main(["--config", snakemake.input.settings], grades=list(snakemake.input.grades)))  # noqa: F821
sys.exit(main())
