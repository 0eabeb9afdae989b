"""sandbatch: evaluate coding agents on software-engineering benchmarks inside sandboxes."""

from pathlib import Path

__version__ = "0.1.0"

# The checkout holding src/ (its tests, corpus/, benchmarks/). The files a run needs are found
# through sandbatch.core.resources, which also knows an installed wheel's copies.
REPO_ROOT = Path(__file__).resolve().parents[2]
