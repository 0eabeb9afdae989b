#!/usr/bin/env bash
# Install headless Chromium (Debian package `chromium`) for the report test
# (tests/test_report.py renders `snakemake --report` and checks it in the browser).
# Idempotent; needs root. Prints the browser's version.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ]; then
        echo "chromium.sh: chromium is not installed and this is not root; run as root" >&2
        exit 1
    fi
    # shellcheck source=../lib/apt.sh
    source "$(dirname "$0")/../lib/apt.sh"
    apt_install chromium fonts-dejavu-core >/dev/null
fi
chromium --version
