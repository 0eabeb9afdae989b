#!/usr/bin/env bash
# Install and start what the full test suite needs (as root, Debian): a Docker engine with
# the local base image, the real OpenSandbox server, a single-node Slurm, headless Chromium.
# A service that cannot run here is reported in one line; the tests that need it then skip with that reason.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "services: not root; skipping system services (their tests will skip)" >&2
  exit 0
fi
bash scripts/services/docker.sh && bash scripts/build-base-image.sh \
  || echo "services: docker unavailable; docker tests will skip" >&2
bash scripts/services/opensandbox.sh || echo "services: no OpenSandbox server; its tests will skip" >&2
bash scripts/services/slurm.sh || echo "services: slurm unavailable; slurm tests will skip" >&2
bash scripts/services/node.sh || echo "services: no node/npm; the OpenCode test will skip" >&2
bash scripts/services/chromium.sh || echo "services: chromium unavailable; the report check will skip" >&2
exit 0
