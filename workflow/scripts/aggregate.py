"""Workflow step 'aggregate' (see sandbatch.steps.aggregate); runs standalone too: --help."""
import sys

from sandbatch.steps.aggregate import main

sys.exit(main())
