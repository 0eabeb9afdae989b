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
# the Terminal-Bench grader brings a static shell and core tools into the agent's sandbox
# (grading/tb_verifier.py): Debian's bash-static and busybox-static, where apt can install them
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    # shellcheck source=lib/apt.sh
    . scripts/lib/apt.sh
    apt_install bash-static busybox-static >/dev/null || echo "setup: apt-get install bash-static busybox-static failed" >&2
fi
