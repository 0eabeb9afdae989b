#!/usr/bin/env bash
# Set up (venv, package, test dependencies, and as root the services the tests need), then
# run the whole test suite. Extra arguments are passed on to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
# as root, start the services in scripts/services/ (one line each; tests that need a
# service that did not come up skip and say why)
if [ "$(id -u)" -eq 0 ]; then
    for svc in scripts/services/*.sh; do
        [ -e "$svc" ] && { bash "$svc" || true; }
    done
fi
exec .venv/bin/python -m pytest "$@"
