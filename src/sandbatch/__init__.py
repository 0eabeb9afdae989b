"""sandbatch: evaluate coding agents on software-engineering benchmarks inside sandboxes."""

from pathlib import Path

__version__ = "0.1.0"

# The package is installed editable from its checkout; schemas/ and data/ live beside src/.
REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = REPO_ROOT / "schemas"
