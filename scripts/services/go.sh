#!/usr/bin/env bash
# The Go toolchain for the grading tests that run the real `go test` (tests/test_attacks_static.py:
# Go rows' vendor/, go.mod and go.work exploits). Machines that already have it are left alone;
# else Debian's package.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v go >/dev/null 2>&1; then
    # shellcheck source=../lib/apt.sh
    source scripts/lib/apt.sh
    apt_install golang-go
fi
echo "go: $(go version)"
