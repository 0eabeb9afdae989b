"""Workflow step 'aggregate' (see sandbatch.steps.aggregate); runs standalone too: --help."""
import sys

from sandbatch.steps.entrypoint import run_step

sys.exit(run_step("aggregate"))
