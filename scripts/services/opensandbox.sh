#!/usr/bin/env bash
# The real OpenSandbox server (PyPI opensandbox-server, Docker runtime) for the tests of the
# opensandbox provider, on 127.0.0.1:${SANDBATCH_TEST_OPENSANDBOX_PORT:-18080}. Idempotent: a
# server already answering /health on that port is reused. Needs a running Docker engine, PyPI
# (through pip) and the server's execd image, which is taken from the first of:
#   1. an image already on the engine: the official one (the image the server's own example
#      config names, e.g. opensandbox/execd:v1.1.0) or opensandbox-local/execd:dev;
#   2. $SANDBATCH_OPENSANDBOX_SERVER_DIR/execd-image.tar.gz (default ../shared/opensandbox-server/),
#      a root filesystem imported as opensandbox-local/execd:dev;
#   3. the official image, pulled from its registry;
# and when none works it exits 1 with one line naming the three. SANDBATCH_OPENSANDBOX_EXECD_IMAGE
# names another image to use instead (on the engine, else imported under that name, else pulled).
# Once /health answers it prints
#   pid=<pid> url=http://127.0.0.1:<port> key=<key>       (stop the server with: kill <pid>)
# Environment (all optional):
#   SANDBATCH_TEST_OPENSANDBOX_PORT   the port                                    [18080]
#   SANDBATCH_TEST_OPENSANDBOX_KEY    the API key                                  [opensandbox-test-key]
#   SANDBATCH_TEST_OPENSANDBOX_STATE  venv, server.toml, database and server.log   [/var/lib/sandbatch/opensandbox-server]
#   SANDBATCH_OPENSANDBOX_SERVER_VERSION  the PyPI version                         [1.1.1]
#   SANDBATCH_OPENSANDBOX_PULL_TIMEOUT    seconds a pull may take                  [600]
set -euo pipefail
cd "$(dirname "$0")/../.."
port=${SANDBATCH_TEST_OPENSANDBOX_PORT:-18080}
key=${SANDBATCH_TEST_OPENSANDBOX_KEY:-opensandbox-test-key}
state=${SANDBATCH_TEST_OPENSANDBOX_STATE:-/var/lib/sandbatch/opensandbox-server}
version=${SANDBATCH_OPENSANDBOX_SERVER_VERSION:-1.1.1}
bundle=${SANDBATCH_OPENSANDBOX_SERVER_DIR:-../shared/opensandbox-server}/execd-image.tar.gz
local_image=opensandbox-local/execd:dev
url=http://127.0.0.1:$port

fail() { echo "opensandbox.sh: $*" >&2; exit 1; }
healthy() { python3 -c "import urllib.request as u; u.urlopen('$url/health', timeout=2)" 2>/dev/null; }
on_engine() { docker image inspect "$1" >/dev/null 2>&1; }

if healthy; then
    echo "opensandbox: server already up at $url"
    exit 0
fi
docker info >/dev/null 2>&1 || fail "no Docker engine answers; start one first (scripts/services/docker.sh)"

mkdir -p "$state"
state=$(cd "$state" && pwd)
venv=$state/venv
installed() { "$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("opensandbox-server"))' 2>/dev/null; }
if [ "$(installed)" != "$version" ]; then
    "${PYTHON:-$(command -v python3.11 || command -v python3)}" -m venv "$venv"
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip install -q "opensandbox-server==$version" 2>&1 |
        grep -v "^WARNING: Location" >&2 || true
    [ -x "$venv/bin/opensandbox-server" ] || fail "pip could not install opensandbox-server==$version into $venv"
fi

# The official execd image: the one the server's own example config (init-config) names.
"$venv/bin/opensandbox-server" init-config "$state/example.toml" --example docker --force >/dev/null
official=$("$venv/bin/python" -c 'import sys, tomllib
print(tomllib.load(open(sys.argv[1], "rb"))["runtime"]["execd_image"])' "$state/example.toml")
wanted=${SANDBATCH_OPENSANDBOX_EXECD_IMAGE:-$official}
candidates=("$wanted")
[ -n "${SANDBATCH_OPENSANDBOX_EXECD_IMAGE:-}" ] || candidates+=("$local_image")

image=
for candidate in "${candidates[@]}"; do
    if on_engine "$candidate"; then image=$candidate; break; fi
done
if [ -z "$image" ] && [ -f "$bundle" ]; then
    image=${SANDBATCH_OPENSANDBOX_EXECD_IMAGE:-$local_image}
    docker import -c 'ENTRYPOINT ["/execd"]' -c 'ENV PATH=/bin' "$bundle" "$image" >/dev/null \
        || fail "docker import of $bundle failed"
fi
if [ -z "$image" ]; then
    pulled=$(timeout "${SANDBATCH_OPENSANDBOX_PULL_TIMEOUT:-600}" docker pull -q "$wanted" 2>&1) && image=$wanted \
        || fail "no execd image: ${candidates[*]} not on the engine, $bundle is missing, and pulling" \
                "$wanted failed ($(tail -n 1 <<<"${pulled:-timed out}")); provide one of them (docker pull/load the" \
                "image, or set SANDBATCH_OPENSANDBOX_SERVER_DIR to a directory holding execd-image.tar.gz)"
fi

# The server on this host only: sandboxes on the default bridge with their ports published on
# 127.0.0.1, state in SQLite. The image's hardening helpers (bwrap, the session gate) are absent
# here, so the kernel-level limits below are what confines a sandbox.
cat >"$state/server.toml" <<TOML
[server]
host = "127.0.0.1"
port = $port
api_key = "$key"
max_sandbox_timeout_seconds = 86400

[log]
level = "INFO"

[runtime]
type = "docker"
execd_image = "$image"

[docker]
network_mode = "bridge"
publish_host = "127.0.0.1"
port_range_min = 41000
port_range_max = 41999
no_new_privileges = true
pids_limit = 4096
drop_capabilities = ["AUDIT_WRITE", "MKNOD", "NET_ADMIN", "NET_RAW", "SYS_ADMIN", "SYS_MODULE", "SYS_PTRACE", "SYS_TIME", "SYS_TTY_CONFIG"]
apparmor_profile = ""
seccomp_profile = ""

[proxy]
resolve_internal = false

[ingress]
mode = "direct"

[storage]
allowed_host_paths = []

[store]
type = "sqlite"
path = "$state/opensandbox.db"
TOML

"$venv/bin/opensandbox-server" --config "$state/server.toml" >"$state/server.log" 2>&1 </dev/null &
pid=$!
for _ in $(seq 120); do
    if healthy; then
        echo "pid=$pid url=$url key=$key"
        exit 0
    fi
    kill -0 "$pid" 2>/dev/null || fail "opensandbox-server exited; see $state/server.log"
    sleep 0.5
done
kill "$pid"
fail "opensandbox-server did not answer /health in 60 s; see $state/server.log"
