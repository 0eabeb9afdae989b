"""Workflow step 'sandbox' (see sandbatch.steps.sandbox); runs standalone too: --help."""
import sys

from sandbatch.steps.client import run_step

sys.exit(run_step("sandbox"))
