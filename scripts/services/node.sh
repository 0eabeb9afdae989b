#!/usr/bin/env bash
# Node.js and npm for the OpenCode harness test (it installs `opencode-ai` from npm inside a
# local sandbox). Machines that already have them are left alone; else Debian's packages.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v npm >/dev/null 2>&1; then
    # shellcheck source=../lib/apt.sh
    source scripts/lib/apt.sh
    apt_install nodejs npm
fi
echo "node: $(node --version), npm $(npm --version)"
