#!/usr/bin/env bash
# Build the local base image of the docker sandbox provider's tests, without a registry:
#
#   bash scripts/build-base-image.sh            # after scripts/services/docker.sh
#
# A Debian root filesystem made by debootstrap (minbase + python3, pytest, git,
# ca-certificates, patch) is imported with `docker import`. Both steps are cached:
#  - the image carries the label io.sandbatch.recipe=<hash of the recipe> (outside the
#    sandbatch. prefix: containers inherit image labels); an image with the
#    same hash is left alone;
#  - the root filesystem tarball is kept in $SANDBATCH_CACHE, so re-importing it (after
#    `docker rmi`, or on a machine whose engine lost its images) skips debootstrap.
# Change RECIPE_VERSION whenever the post-processing below changes what the image holds.
# Ends by running a container from the image, so a success means containers really run.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib/apt.sh
. "$here/lib/apt.sh"

IMAGE=${SANDBATCH_BASE_IMAGE:-sandbatch/base:bookworm}
SUITE=bookworm
VARIANT=minbase
INCLUDE=python3,python3-pytest,git,ca-certificates,patch
RECIPE_VERSION=1
CACHE=${SANDBATCH_CACHE:-/var/cache/sandbatch}

fail() { echo "build-base-image.sh: $*" >&2; exit 1; }
say() { echo "build-base-image.sh: $*"; }

# The host's own Debian mirror: it is the one this machine (and its proxy) can reach.
host_mirror() {
    local uri
    uri=$( (grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}'
            grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}') |
           grep -v security | head -n 1 || true)
    echo "${uri:-http://deb.debian.org/debian}"
}
MIRROR=${DEBIAN_MIRROR:-$(host_mirror)}

recipe="suite=$SUITE variant=$VARIANT include=$INCLUDE version=$RECIPE_VERSION"
hash=$(printf '%s' "$recipe" | sha256sum | cut -c1-16)
tarball="$CACHE/rootfs-$SUITE-$hash.tar"

docker info >/dev/null 2>&1 || fail "no Docker engine answers; run scripts/services/docker.sh first"
mkdir -p "$CACHE"
exec 9>"$CACHE/build-base-image.lock"
flock 9  # two builds at once would both debootstrap

have=$(docker image inspect "$IMAGE" --format '{{index .Config.Labels "io.sandbatch.recipe"}}' 2>/dev/null || true)
if [[ "$have" == "$hash" ]]; then
    say "$IMAGE is up to date (recipe $hash)"
    exit 0
fi

if [[ ! -s "$tarball" ]]; then
    [[ $(id -u) == 0 ]] || fail "debootstrap needs root"
    apt_install debootstrap >/dev/null || fail "apt-get install debootstrap failed"
    root=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    trap 'umount -R "$root"/proc "$root"/sys 2>/dev/null; rm -rf "$root" "$tarball.part"' EXIT
    t0=$SECONDS
    say "debootstrap $SUITE from $MIRROR ..."
    if ! debootstrap --variant="$VARIANT" --include="$INCLUDE" "$SUITE" "$root" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1; then
        tail -n 5 "$CACHE/debootstrap.log" "$root/debootstrap/debootstrap.log" 2>/dev/null >&2
        fail "debootstrap failed; full log in $CACHE/debootstrap.log"
    fi
    say "debootstrap took $((SECONDS - t0)) s"
    # Docker provides these per container; the build host's copies do not belong in the image.
    rm -f "$root/etc/hostname" "$root/etc/resolv.conf"
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
    t0=$SECONDS
    tar --numeric-owner --one-file-system -C "$root" -cf "$tarball.part" .
    mv "$tarball.part" "$tarball"
    find "$CACHE" -maxdepth 1 -name "rootfs-$SUITE-*.tar" ! -path "$tarball" -delete  # older recipes
    rm -rf "$root"
    trap - EXIT
    say "rootfs tarball $tarball ($(du -m "$tarball" | cut -f1) MB) in $((SECONDS - t0)) s"
else
    say "using cached rootfs $tarball"
fi

old_id=$(docker image inspect "$IMAGE" --format '{{.Id}}' 2>/dev/null || true)
t0=$SECONDS
docker import \
    --change "LABEL io.sandbatch.recipe=$hash" \
    --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8" \
    --change 'CMD ["bash"]' \
    "$tarball" "$IMAGE" >/dev/null || fail "docker import of $tarball failed"
say "imported $IMAGE in $((SECONDS - t0)) s"
# the previous build lost its tag; drop it unless containers still use it
if [[ -n "$old_id" ]]; then docker rmi "$old_id" >/dev/null 2>&1 || true; fi

# prove that a container runs, not only that the engine answers
out=$(docker run --rm --network none "$IMAGE" python3 -c 'import pytest, sys; print(sys.version.split()[0], pytest.__version__)' 2>&1) ||
    fail "the engine cannot run a container from $IMAGE: $(tail -n 1 <<<"$out")"
say "$IMAGE runs: python $out"
