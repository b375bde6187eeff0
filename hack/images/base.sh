#!/usr/bin/env bash
# A local stand-in for python:3.11-slim-bookworm, built without any container registry:
# debootstrap (minbase) a Debian bookworm from the Debian mirror, import it into Docker, and
# add a Python virtual environment on PATH, so that `python`, `pip`, `groupadd`, `useradd`
# behave as in the official image. See hack/images/README.md.
#
#   hack/images/base.sh            build kerasjob.local/python:3.11-bookworm (skips if current)
#
# Idempotent: the image carries the hash of its recipe (this script, the mirror, the CA
# files) in the label dev.kerasjob.base-recipe and is rebuilt only when that changes. The
# debootstrap rootfs is cached as a tarball under ${KERASJOB_CACHE}/images/rootfs/.
#
# The host's extra CA certificates (/usr/local/share/ca-certificates, e.g. a TLS-inspecting
# egress proxy's) are trusted in this LOCAL base only, and PIP_CERT/SSL_CERT_FILE/
# REQUESTS_CA_BUNDLE point at the system bundle, so that `pip install` in the project's
# Dockerfiles works behind such a proxy. The project's Dockerfiles know nothing of this.
#
# Needs root, debootstrap and a reachable Docker daemon (DOCKER, DOCKER_HOST as set by
# hack/images/build.sh). Environment: BASE_IMAGE_NAME, DEBIAN_MIRROR, DEBIAN_SUITE.
set -euo pipefail
# shellcheck source=hack/images/lib.sh
source "$(dirname "$0")/lib.sh"

BASE_IMAGE_NAME="${BASE_IMAGE_NAME:-kerasjob.local/python:3.11-bookworm}"
DEBIAN_SUITE="${DEBIAN_SUITE:-bookworm}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# python3-venv brings ensurepip (pip + setuptools wheels); passwd (groupadd, useradd) is in
# minbase already.
DEBOOTSTRAP_INCLUDE="python3,python3-venv,ca-certificates"
CA_DIR=/usr/local/share/ca-certificates
DOCKER="${DOCKER:-docker}"
LABEL=dev.kerasjob.base-recipe

command -v debootstrap >/dev/null \
  || die "debootstrap not found; install it (apt-get install debootstrap) to build the local base image"
command -v "$DOCKER" >/dev/null || die "docker not found"
"$DOCKER" version >/dev/null 2>&1 || die "the docker daemon is not reachable ('$DOCKER version' failed; hack/images/dockerd.sh start)"

sha() { sha256sum | cut -c1-16; }

# The rootfs depends on the debootstrap arguments and the clean-up below (this script).
rootfs_hash="$(printf '%s\n' "$DEBIAN_SUITE" "$DEBIAN_MIRROR" "$DEBOOTSTRAP_INCLUDE" \
  "$(sed -n '/^# --- rootfs/,/^# --- end rootfs/p' "$0")" | sha)"
ca_files=()
if [ -d "$CA_DIR" ]; then
  while IFS= read -r f; do ca_files+=("$f"); done < <(find "$CA_DIR" -name '*.crt' -type f | sort)
fi
recipe="$( { cat "$0"; printf '%s\n' "$rootfs_hash"; [ ${#ca_files[@]} -eq 0 ] || cat "${ca_files[@]}"; } | sha)"

current="$("$DOCKER" image inspect -f "{{index .Config.Labels \"$LABEL\"}}" "$BASE_IMAGE_NAME" 2>/dev/null || true)"
if [ "$current" = "$recipe" ]; then
  log "base image $BASE_IMAGE_NAME is up to date (recipe $recipe)"
  exit 0
fi

[ "$(id -u)" = 0 ] || die "building the base image needs root (debootstrap)"
rootfs_image="kerasjob.local/debian:$DEBIAN_SUITE-minbase-$rootfs_hash"
tarball="$IMAGES_CACHE/rootfs/debian-$DEBIAN_SUITE-minbase-$rootfs_hash.tar.gz"
mkdir -p "$IMAGES_CACHE/rootfs"

work=""
cleanup() {
  [ -n "$work" ] || return 0
  # debootstrap mounts /proc and /sys in the target while it configures packages; it
  # unmounts them, but not when it is interrupted.
  awk -v w="$work/" 'index($2, w) == 1 { print $2 }' /proc/self/mounts | sort -r \
    | while IFS= read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
  rm -rf "$work"
}
trap cleanup EXIT

# --- rootfs: debootstrap, slimmed like debian:bookworm-slim ---------------------------------
make_rootfs() {
  local dir="$1"
  log "debootstrap --variant=minbase $DEBIAN_SUITE from $DEBIAN_MIRROR (a few minutes)"
  debootstrap --variant=minbase --include="$DEBOOTSTRAP_INCLUDE" \
    "$DEBIAN_SUITE" "$dir" "$DEBIAN_MIRROR" >"$IMAGES_CACHE/rootfs/debootstrap.log" 2>&1 \
    || { tail -n 20 "$IMAGES_CACHE/rootfs/debootstrap.log" >&2; die "debootstrap failed; see $IMAGES_CACHE/rootfs/debootstrap.log"; }
  # What debian:*-slim leaves out, for this install and later apt-get installs.
  cat >"$dir/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
  cat >"$dir/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
Acquire::GzipIndexes "true";
EOF
  find "$dir/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$dir/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$dir"/usr/share/man/* "$dir"/usr/share/info/* "$dir"/var/lib/apt/lists/* \
    "$dir"/var/cache/apt/*.bin "$dir"/var/cache/apt/archives/*.deb "$dir"/var/cache/debconf/*-old \
    "$dir"/var/log/* "$dir"/tmp/* "$dir"/root/.cache
  find "$dir/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
  # The host's name server and name are not the image's; Docker provides both at run time.
  : >"$dir/etc/resolv.conf"
  : >"$dir/etc/hostname"
}
# --- end rootfs ----------------------------------------------------------------------------

if ! "$DOCKER" image inspect "$rootfs_image" >/dev/null 2>&1; then
  if [ ! -s "$tarball" ]; then
    work="$(mktemp -d "$IMAGES_CACHE/rootfs/work.XXXXXX")"
    make_rootfs "$work/rootfs"
    log "packing the rootfs into $tarball"
    tar --numeric-owner --xattrs -C "$work/rootfs" -c . | gzip -1 >"$tarball.tmp"
    mv "$tarball.tmp" "$tarball"
    cleanup
    work=""
  fi
  log "importing $tarball as $rootfs_image"
  "$DOCKER" import "$tarball" "$rootfs_image" >/dev/null
fi

# --- the Python layer: a venv on PATH, the host's CAs -----------------------------------------
work="$(mktemp -d "$IMAGES_CACHE/rootfs/work.XXXXXX")"
mkdir -p "$work/ca"
[ ${#ca_files[@]} -eq 0 ] || cp "${ca_files[@]}" "$work/ca/"
cat >"$work/Dockerfile" <<EOF
FROM $rootfs_image
COPY ca/ $CA_DIR/
RUN update-ca-certificates >/dev/null \\
 && python3 -m venv /opt/venv \\
 && /opt/venv/bin/python -c "import ssl, venv, ensurepip" \\
 && /opt/venv/bin/pip --version \\
 && command -v groupadd useradd >/dev/null
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    LANG=C.UTF-8 \\
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \\
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \\
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
LABEL $LABEL=$recipe \\
      org.opencontainers.image.description="Debian $DEBIAN_SUITE minbase + python3 venv: a local stand-in for python:3.11-slim-bookworm (hack/images/base.sh)"
CMD ["python3"]
EOF
log "building $BASE_IMAGE_NAME (recipe $recipe)"
# No network needed (and a private daemon has no bridge): --network none.
DOCKER_BUILDKIT=0 "$DOCKER" build -q --network none \
  -t "$BASE_IMAGE_NAME" "$work" >/dev/null
"$DOCKER" run --rm --network none "$BASE_IMAGE_NAME" python -c \
  "import sys; assert sys.version_info[:2] == (3, 11), sys.version" \
  || die "$BASE_IMAGE_NAME: python is not 3.11"
log "base image $BASE_IMAGE_NAME ready"
