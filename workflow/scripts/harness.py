"""Workflow step 'harness' (see sandbatch.steps.harness); runs standalone too: --help."""
import sys

from sandbatch.steps.common import main
from sandbatch.steps.harness import HarnessStep

sys.exit(main(HarnessStep))
