#!/usr/bin/env bash
# The real OpenSandbox server (PyPI opensandbox-server, Docker runtime) for the tests of the
# opensandbox provider, on 127.0.0.1:${SANDBATCH_TEST_OPENSANDBOX_PORT:-18080}. Needs a running
# Docker engine and ../shared/opensandbox-server/ (the execd image, which no registry here
# serves). Idempotent: a server already answering /health on that port is reused.
set -euo pipefail
cd "$(dirname "$0")/../.."
port=${SANDBATCH_TEST_OPENSANDBOX_PORT:-18080}
key=${SANDBATCH_TEST_OPENSANDBOX_KEY:-opensandbox-test-key}
state=${SANDBATCH_TEST_OPENSANDBOX_STATE:-/var/lib/sandbatch/opensandbox-server}
starter=${SANDBATCH_OPENSANDBOX_SERVER_DIR:-../shared/opensandbox-server}/start.sh
if python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/health', timeout=2)" 2>/dev/null; then
    echo "opensandbox: server already up at http://127.0.0.1:$port"
    exit 0
fi
if [ ! -f "$starter" ]; then
    echo "opensandbox.sh: $starter is missing (it holds the execd image the server needs)" >&2
    exit 1
fi
bash "$starter" "$state" "$port" "$key"
