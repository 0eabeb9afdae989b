"""Workflow step 'grade' (see sandbatch.steps.grade); runs standalone too: --help."""
import sys

from sandbatch.steps.common import main
from sandbatch.steps.grade import GradeStep

sys.exit(main(GradeStep))
