"""Workflow step 'convert' (see sandbatch.steps.convert); runs standalone too: --help."""
import sys

from sandbatch.steps.entrypoint import run_step

sys.exit(run_step("convert"))
