#!/usr/bin/env bash
# Set up (venv, package, test dependencies, and as root the services the tests need), then
# run the whole test suite. Extra arguments are passed on to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
exec .venv/bin/python -m pytest "$@"
