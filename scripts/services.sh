#!/usr/bin/env bash
# Install and start what the full test suite needs (as root, Debian): a Docker engine with
# the local base image, the real OpenSandbox server, a single-node Slurm, Node/npm, Go, headless
# Chromium, NeMo Gym in a Python 3.12 environment of its own, and the Arize Phoenix trace
# server (in an environment of its own too). Each service that cannot
# start is reported in one line. Without
# SANDBATCH_REQUIRE_SERVICES=1 the script still exits 0 and the tests that need a missing
# service skip with its reason; with it (CI, .ci/run) a missing service fails this script,
# and any test that would skip for one fails too (tests/services.py).
#
# Independent services start at once, in four chains: Docker then OpenSandbox (it needs the
# engine); Slurm, Node, Go, Chromium (Debian packages: scripts/lib/apt.sh runs one apt at a
# time); NeMo Gym; Phoenix (the last two are pip installs of minutes on a fresh machine). Each
# script's output is printed when it ends, then one line with its seconds (for the apt ones,
# waiting for apt included), and a last line with the whole start-up's.
set -uo pipefail
cd "$(dirname "$0")/.."
required=0
[ "${SANDBATCH_REQUIRE_SERVICES:-0}" = 0 ] || required=1
if [ "$(id -u)" != 0 ]; then
  echo "services: not root; cannot start system services (their tests will skip)" >&2
  [ "$required" = 0 ] || { echo "services: SANDBATCH_REQUIRE_SERVICES=1 needs root" >&2; exit 1; }
  exit 0
fi
start=$SECONDS
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# service NAME COMMAND...: run one service's start, its output kept in $out until it ends, then
# printed whole (chains running at once do not interleave their lines) with its seconds
service() {
  local name=$1 t0=$SECONDS rc=0
  shift
  "$@" >"$out/$name.log" 2>&1 || rc=$?
  {
    flock 9
    cat "$out/$name.log"
    if [ "$rc" = 0 ]; then
      echo "services: $name up in $((SECONDS - t0)) s"
    else
      echo "services: $name FAILED (exit $rc) after $((SECONDS - t0)) s"
      touch "$out/$name.failed"
    fi
  } 9>"$out/print.lock"
}

names=(docker opensandbox slurm node go chromium nemo-gym phoenix)
{ service docker bash -c 'bash scripts/services/docker.sh && bash scripts/build-base-image.sh'
  service opensandbox bash scripts/services/opensandbox.sh; } &
{ service slurm bash scripts/services/slurm.sh
  service node bash scripts/services/node.sh
  service go bash scripts/services/go.sh
  service chromium bash scripts/services/chromium.sh; } &
service nemo-gym bash scripts/services/nemo_gym.sh &
service phoenix bash scripts/services/phoenix.sh &
wait

failed=()
for name in "${names[@]}"; do
  [ ! -e "$out/$name.failed" ] || failed+=("$name")
done
echo "services: start-up took $((SECONDS - start)) s"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "services: could not start: ${failed[*]}; the tests that need them will $([ "$required" = 1 ] && echo fail || echo skip)" >&2
  [ "$required" = 0 ] || exit 1
fi
exit 0
