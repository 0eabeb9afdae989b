#!/usr/bin/env bash
# Create .venv (Python >= 3.11) and install sandbatch into it, editable. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$(command -v python3.11 || command -v python3)}
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "sandbatch needs Python >= 3.11, found " + sys.version.split()[0])'
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
extras=${1:+[$1]}
.venv/bin/python -m pip install -q -e ".${extras}"
