"""Workflow step 'patch' (see sandbatch.steps.patch); runs standalone too: --help."""
import sys

from sandbatch.steps.entrypoint import run_step

sys.exit(run_step("patch"))
