"""Workflow step 'patch' (see sandbatch.steps.patch); runs standalone too: --help."""
import sys

from sandbatch.steps.common import main
from sandbatch.steps.patch import PatchStep

sys.exit(main(PatchStep))
