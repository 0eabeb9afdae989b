"""Workflow step 'grade' (see sandbatch.steps.grade); runs standalone too: --help."""
import sys

from sandbatch.steps.entrypoint import run_step

sys.exit(run_step("grade"))
