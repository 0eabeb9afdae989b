"""Workflow step 'harness' (see sandbatch.steps.harness); runs standalone too: --help."""
import sys

from sandbatch.steps.entrypoint import run_step

sys.exit(run_step("harness"))
