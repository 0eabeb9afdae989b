"""Workflow step 'convert' (see sandbatch.steps.convert); runs standalone too: --help."""
import sys

from sandbatch.steps.common import main
from sandbatch.steps.convert import ConvertStep

sys.exit(main(ConvertStep))
