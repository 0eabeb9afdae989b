#!/usr/bin/env bash
# Make a local Docker engine answer, for the docker sandbox provider and its tests.
#
#   bash scripts/services/docker.sh
#
# Idempotent: a no-op when `docker info` already answers. Otherwise (as root) installs
# Debian's docker.io if dockerd is missing, starts dockerd in the background with its log
# in $DOCKERD_LOG (extra daemon flags in $DOCKERD_ARGS) and waits at most $DOCKER_WAIT
# seconds until `docker info` answers.
# When no engine can run here it exits 1 with one line on stderr saying why, also kept in
# $SANDBATCH_CACHE/docker-unavailable for the tests, which skip with it.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib/apt.sh
. "$here/../lib/apt.sh"

LOG=${DOCKERD_LOG:-/var/log/sandbatch-dockerd.log}
WAIT=${DOCKER_WAIT:-90}

# The last reason no engine could run, for the tests to skip with (removed once one runs).
REASON_FILE="$SANDBATCH_CACHE/docker-unavailable"

fail() {
    echo "docker.sh: $*" >&2
    mkdir -p "$SANDBATCH_CACHE" 2>/dev/null && echo "$*" >"$REASON_FILE" 2>/dev/null
    exit 1
}
ok() { echo "docker.sh: $*"; rm -f "$REASON_FILE" 2>/dev/null; exit 0; }
engine_version() { docker info --format '{{.ServerVersion}}' 2>/dev/null; }

if command -v docker >/dev/null && v=$(engine_version) && [[ -n "$v" ]]; then
    ok "engine already running (server $v)"
fi
[[ $(id -u) == 0 ]] || fail "no Docker engine answers, and starting one needs root (run this as root or start dockerd yourself)"

if ! command -v dockerd >/dev/null; then
    t0=$SECONDS
    # keep the package's init script from starting a daemon we do not control
    guard=
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && guard=1
    fi
    apt_install docker.io >/dev/null
    rc=$?
    [[ -n "$guard" ]] && rm -f /usr/sbin/policy-rc.d
    [[ $rc == 0 ]] || fail "apt-get install docker.io failed (exit $rc); see the apt output above"
    command -v dockerd >/dev/null || fail "docker.io installed but dockerd is not on PATH ($PATH)"
    echo "docker.sh: installed docker.io in $((SECONDS - t0)) s"
fi

# is PID a live process (not a zombie) named NAME?
alive() {
    [[ -n "$1" && "$(cat "/proc/$1/comm" 2>/dev/null)" == "$2" ]] &&
        [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) =~ ^[RSDt]$ ]]
}

# A daemon that is starting already: wait for it instead of starting a second one.
pid=
for p in $(pgrep -x dockerd); do alive "$p" dockerd && pid=$p && break; done
log_from=1
if [[ -z "$pid" ]]; then
    # Leftovers of a daemon that was killed (the machine keeps its disk, not its
    # processes): dockerd trusts a pid file whose process still exists, zombies included,
    # and then waits for a containerd that never answers.
    rm -f /run/docker.pid
    managed=/run/docker/containerd/containerd.pid
    alive "$(cat "$managed" 2>/dev/null)" containerd || rm -f "$managed"
    if ! pgrep -x containerd >/dev/null; then
        # dockerd uses a system containerd whenever this socket exists, even a dead one
        rm -f /run/containerd/containerd.sock
    fi
    # shellcheck disable=SC2206  # extra daemon flags, split into words on purpose
    args=(${DOCKERD_ARGS:-})
    # containers inherit the bridge's MTU; match the uplink so large TLS records get through
    dev=$(ip -o route show default 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i + 1); exit}}')
    mtu=$(cat "/sys/class/net/${dev:-none}/mtu" 2>/dev/null || true)
    [[ -n "$mtu" && "$mtu" -lt 1500 ]] && args+=(--mtu "$mtu")
    mkdir -p "$(dirname "$LOG")"
    touch "$LOG"
    log_from=$(($(wc -l <"$LOG") + 1))  # only this start's lines explain its failure
    echo "=== $(date -Is) dockerd ${args[*]}" >>"$LOG"
    setsid dockerd "${args[@]}" >>"$LOG" 2>&1 </dev/null &
    pid=$!
    echo "docker.sh: started dockerd (pid $pid, log $LOG)"
fi

t0=$SECONDS
while ((SECONDS - t0 < WAIT)); do
    if v=$(engine_version) && [[ -n "$v" ]]; then
        ok "engine up (server $v) after $((SECONDS - t0)) s"
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
        recent=$(tail -n "+$log_from" "$LOG")
        reason=$(grep -iE 'level=(fatal|error)|failed to start|error starting daemon|^Status: ' <<<"$recent" | tail -n 1)
        # fatal errors are often printed bare, after the last (info) log line
        [[ -n "$reason" ]] || reason=$(grep -vE '^===|level=(info|debug|warning)' <<<"$recent" | tail -n 1)
        fail "dockerd exited: ${reason:-no message, see $LOG}"
    fi
    sleep 0.5
done
fail "dockerd (pid $pid) did not answer within $WAIT s; see $LOG"
