#!/usr/bin/env bash
# Arize Phoenix (PyPI arize-phoenix), a trace backend that takes OTLP over HTTP and gRPC, for
# the tests that send a run's traces to it and read them back with Phoenix's own client. It
# lives in a Python environment of its own (its dependency tree is large and pins its own
# OpenTelemetry and web stack), at ${SANDBATCH_PHOENIX_VENV:-/var/lib/sandbatch/phoenix-$version},
# and serves from a working directory of its own (a SQLite database; nothing is fetched) on
# 127.0.0.1:${SANDBATCH_PHOENIX_PORT:-6006} (HTTP: UI, API, OTLP /v1/traces) and
# :${SANDBATCH_PHOENIX_GRPC_PORT:-4317} (OTLP gRPC). Idempotent: a running server is kept.
set -euo pipefail
version=20.26.1
venv=${SANDBATCH_PHOENIX_VENV:-/var/lib/sandbatch/phoenix-$version}
port=${SANDBATCH_PHOENIX_PORT:-6006}
grpc_port=${SANDBATCH_PHOENIX_GRPC_PORT:-4317}
data=${SANDBATCH_PHOENIX_DIR:-/var/lib/sandbatch/phoenix-data}
stamp="$venv/.sandbatch-phoenix-$version"
up() { curl -fs -o /dev/null --max-time 2 "http://127.0.0.1:$port/healthz"; }
if up; then
    echo "phoenix: running on 127.0.0.1:$port"
    exit 0
fi
if ! { [ -f "$stamp" ] && "$venv/bin/python" -c 'import phoenix' 2>/dev/null; }; then
    # the first Python 3.10-3.13 (Phoenix's range) that runs: $SANDBATCH_PHOENIX_PYTHON, python3.12
    # on PATH, pyenv's newest 3.12, python3
    python=
    for candidate in "${SANDBATCH_PHOENIX_PYTHON:-}" "$(command -v python3.12 || true)" \
            $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python 2>/dev/null | sort -V -r) \
            "$(command -v python3 || true)"; do
        if [ -n "$candidate" ] && "$candidate" -c 'import sys, venv; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 13))' 2>/dev/null; then
            python=$candidate
            break
        fi
    done
    if [ -z "$python" ]; then
        echo "phoenix.sh: no Python 3.10-3.13 found for arize-phoenix $version; set SANDBATCH_PHOENIX_PYTHON" >&2
        exit 1
    fi
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
    "$venv/bin/python" -m pip install -q "arize-phoenix==$version"
    touch "$stamp"
fi
mkdir -p "$data"
# offline: no usage telemetry, no fetches; the UI's assets are in the wheel
PHOENIX_WORKING_DIR=$data PHOENIX_HOST=127.0.0.1 PHOENIX_PORT=$port PHOENIX_GRPC_PORT=$grpc_port \
    PHOENIX_TELEMETRY_ENABLED=false nohup "$venv/bin/phoenix" serve >"$data/phoenix.log" 2>&1 </dev/null &
for _ in $(seq 300); do  # a first start migrates its database: minutes on a loaded host
    if up; then
        echo "phoenix: $version serving on 127.0.0.1:$port (OTLP gRPC :$grpc_port), data in $data"
        exit 0
    fi
    sleep 1
done
echo "phoenix.sh: Phoenix did not answer on 127.0.0.1:$port within 300 s; see $data/phoenix.log" >&2
exit 1
