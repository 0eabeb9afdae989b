# shellcheck shell=bash
# apt_install PKG...: install the Debian packages that are missing, as root, without
# prompts. `apt-get update` runs at most once per hour across scripts (a stamp file), so
# a CI run that calls several service scripts refreshes the lists once; a failed install
# refreshes them once more in case they were stale. The service scripts run at once
# (scripts/services.sh): one apt at a time, under a lock file, the others wait their turn.

SANDBATCH_CACHE=${SANDBATCH_CACHE:-/var/cache/sandbatch}

apt_missing() {
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || echo "$pkg"
    done
}

apt_update_once() {
    local stamp="$SANDBATCH_CACHE/apt-update.stamp"
    mkdir -p "$SANDBATCH_CACHE"
    if [[ "${1:-}" != force && -n "$(find "$stamp" -mmin -60 2>/dev/null)" ]]; then
        return 0
    fi
    apt-get update -qq && touch "$stamp"
}

apt_install() {
    local missing
    missing=$(apt_missing "$@")
    [[ -z "$missing" ]] && return 0
    mkdir -p "$SANDBATCH_CACHE"
    # shellcheck disable=SC2086  # word splitting wanted: one package per word
    (
        flock 8
        {
            apt_update_once &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing </dev/null
        } || {
            apt_update_once force &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing </dev/null
        }
    ) 8>"$SANDBATCH_CACHE/apt.lock"
}
