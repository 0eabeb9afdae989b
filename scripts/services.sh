#!/usr/bin/env bash
# Install and start what the full test suite needs (as root, Debian): a Docker engine with
# the local base image, the real OpenSandbox server, a single-node Slurm, Node/npm, Go, headless
# Chromium, NeMo Gym in a Python 3.12 environment of its own, and the Arize Phoenix trace
# server (in an environment of its own too). Each service that cannot
# start is reported in one line. Without
# SANDBATCH_REQUIRE_SERVICES=1 the script still exits 0 and the tests that need a missing
# service skip with its reason; with it (CI, .ci/run) a missing service fails this script,
# and any test that would skip for one fails too (tests/services.py).
set -uo pipefail
cd "$(dirname "$0")/.."
required=0
[ "${SANDBATCH_REQUIRE_SERVICES:-0}" = 0 ] || required=1
failed=()
if [ "$(id -u)" != 0 ]; then
  echo "services: not root; cannot start system services (their tests will skip)" >&2
  [ "$required" = 0 ] || { echo "services: SANDBATCH_REQUIRE_SERVICES=1 needs root" >&2; exit 1; }
  exit 0
fi
bash scripts/services/docker.sh && bash scripts/build-base-image.sh || failed+=(docker)
bash scripts/services/opensandbox.sh || failed+=(opensandbox)
bash scripts/services/slurm.sh || failed+=(slurm)
bash scripts/services/node.sh || failed+=(node)
bash scripts/services/go.sh || failed+=(go)
bash scripts/services/chromium.sh || failed+=(chromium)
bash scripts/services/nemo_gym.sh || failed+=(nemo-gym)
bash scripts/services/phoenix.sh || failed+=(phoenix)
if [ "${#failed[@]}" -gt 0 ]; then
  echo "services: could not start: ${failed[*]}; the tests that need them will $([ "$required" = 1 ] && echo fail || echo skip)" >&2
  [ "$required" = 0 ] || exit 1
fi
exit 0
