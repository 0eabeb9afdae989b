"""Workflow step 'sandbox' (see sandbatch.steps.sandbox); runs standalone too: --help."""
import sys

from sandbatch.steps.entrypoint import run_step

sys.exit(run_step("sandbox"))
