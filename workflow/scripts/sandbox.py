"""Workflow step 'sandbox' (see sandbatch.steps.sandbox); runs standalone too: --help."""
import sys

from sandbatch.steps.common import main
from sandbatch.steps.sandbox import SandboxStep

sys.exit(main(SandboxStep))
