#!/usr/bin/env bash
# Build the local kind node image, kerasjob.local/kind-node:<Kubernetes version>-<hash>, without
# pulling anything (see hack/kind/README.md):
#
#   hack/kind/node-image.sh            build it unless the daemon has it; prints its name
#   hack/kind/node-image.sh --name     print its name only (nothing is built)
#
# What goes in: the local Debian rootfs of hack/images/base.sh; systemd, runc, the CNI
# plugins, iptables from the Debian mirror (hack/kind/node/Dockerfile); containerd, kubelet,
# kubectl of `make binaries` and kubeadm of hack/kind/build.sh, all at the local cluster's
# pins; and the images kubeadm runs, built here from the same binaries
# (hack/kind/node/component.Dockerfile): kerasjob.local/kube-apiserver, -controller-manager,
# -scheduler, -proxy:<Kubernetes version>, kerasjob.local/etcd:<etcd version>,
# kerasjob.local/coredns:<CoreDNS version>, the pause image of hack/cluster/pause-image.sh,
# and the Pod network kind applies from /kind/manifests/default-cni.yaml
# (kerasjob.local/kind-pod-network:dev, hack/kind/node/pod-network.Dockerfile). kubeadm must
# be told these names: dev/kerasjob_dev/kindconfig.py renders the kind configuration that
# does (imageRepository, etcd's and CoreDNS's tags), from the image's labels.
#
# The tag's hash covers the recipe (hack/kind/node/, this script), the binaries' pins and
# the base image, so a change of any builds a new image; the daemon's layer cache keeps
# rebuilds short, and the superseded node images are removed. Builds run in the daemon of
# `make images` (hack/kind/lib.sh: use_docker_daemon) under its build lock.
set -euo pipefail
# shellcheck source=hack/kind/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=hack/cluster/lib.sh
source "$KIND_DIR/../cluster/lib.sh"

NODE_REPO=kerasjob.local/kind-node
CP_REPO=kerasjob.local
PYTHON_BASE=kerasjob.local/python:3.11-bookworm
COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd coredns)
# Named in hack/kind/node/files/default-cni.yaml.
POD_NETWORK_IMAGE=kerasjob.local/kind-pod-network:dev

# The Debian rootfs hack/images/base.sh imported (the first layer of its Python base).
rootfs_image() {
  local want img
  want="$("$DOCKER" image inspect -f '{{index .RootFS.Layers 0}}' "$PYTHON_BASE" 2>/dev/null)" \
    || die "$PYTHON_BASE is missing: run 'make images' (KERASJOB_LOCAL_BASE=1) first"
  for img in $("$DOCKER" image ls --format '{{.Repository}}:{{.Tag}}' kerasjob.local/debian); do
    if [ "$("$DOCKER" image inspect -f '{{index .RootFS.Layers 0}}' "$img")" = "$want" ]; then
      echo "$img"
      return 0
    fi
  done
  die "no kerasjob.local/debian image under $PYTHON_BASE: remove $PYTHON_BASE and run 'KERASJOB_LOCAL_BASE=1 make images'"
}

component_tag() {  # component_tag NAME: the name kubeadm asks for, given hack/kind/config.py's settings
  case "$1" in
    etcd) echo "$CP_REPO/etcd:$ETCD_VERSION" ;;
    coredns) echo "$CP_REPO/coredns:$COREDNS_VERSION" ;;
    *) echo "$CP_REPO/$1:$KUBE_VERSION" ;;
  esac
}

recipe_hash() {  # recipe_hash BASE_IMAGE_ID
  {
    cat "$0" "$KIND_DIR"/node/*.Dockerfile "$KIND_DIR/node/Dockerfile" "$KIND_DIR"/node/files/*
    echo "$1 $(bin_dir) $("$KIND_DIR/build.sh" --bin kubeadm) $PAUSE_IMAGE"
    cat "$REPO_ROOT/hack/cluster/pause-image.sh" "$REPO_ROOT"/hack/images/pause/*
  } | sha256sum | cut -c1-12
}

# stage DIR FILE...: hard links (copies across file systems) of FILE... in DIR.
stage() {
  local dir="$1" f
  shift
  mkdir -p "$dir"
  for f in "$@"; do ln -f "$f" "$dir/" 2>/dev/null || cp -f "$f" "$dir/"; done
}

build_components() {  # build_components BASE_IMAGE CONTEXT_DIR: the images, saved as one archive
  local base="$1" ctx="$2" c packages tags=()
  for c in "${COMPONENTS[@]}"; do
    packages=""
    [ "$c" != kube-proxy ] || packages="iptables conntrack"
    rm -rf "$ctx/component"
    stage "$ctx/component" "$(bin_dir)/$c"
    log "building $(component_tag "$c")"
    "$DOCKER" build -q --network host -f "$KIND_DIR/node/component.Dockerfile" \
      --build-arg "BASE_IMAGE=$base" --build-arg "BINARY=$c" --build-arg "PACKAGES=$packages" \
      -t "$(component_tag "$c")" "$ctx/component" >/dev/null
    tags+=("$(component_tag "$c")")
  done
  rm -rf "$ctx/component"
  # The Pod network (files/default-cni.yaml): kubectl and a script.
  stage "$ctx/pod-network" "$(bin_dir)/kubectl" "$KIND_DIR/node/files/pod-network"
  log "building $POD_NETWORK_IMAGE"
  "$DOCKER" build -q --network host -f "$KIND_DIR/node/pod-network.Dockerfile" \
    --build-arg "BASE_IMAGE=$base" -t "$POD_NETWORK_IMAGE" "$ctx/pod-network" >/dev/null
  rm -rf "$ctx/pod-network"
  tags+=("$POD_NETWORK_IMAGE")
  # One archive: the layers the images share are imported once.
  "$DOCKER" save -o "$ctx/images/control-plane.tar" "${tags[@]}"
}

build_node() {  # build_node BASE_IMAGE TAG
  local base="$1" tag="$2" ctx="$KERASJOB_RUN/kind/node-context" b cid
  rm -rf "$ctx"
  mkdir -p "$ctx/images"
  cp -r "$KIND_DIR/node/files" "$KIND_DIR/node/Dockerfile" "$ctx/"
  echo images >"$ctx/.dockerignore"
  for b in containerd containerd-shim-runc-v2 ctr kubelet kubectl; do stage "$ctx/bin" "$(bin_dir)/$b"; done
  stage "$ctx/bin" "$("$KIND_DIR/build.sh" --bin kubeadm)"
  echo "$KUBE_VERSION" >"$ctx/version"
  "$REPO_ROOT/hack/cluster/pause-image.sh" "$ctx/images/pause.tar" >/dev/null
  build_components "$base" "$ctx"
  log "building $tag"
  # The images stay out of the build context (a layer of archives), and go into containerd's
  # store in a container of the built image, committed as the node image.
  "$DOCKER" build --network host --build-arg "BASE_IMAGE=$base" \
    --build-arg "IMAGE_REPOSITORY=$CP_REPO" --build-arg "ETCD_TAG=$ETCD_VERSION" \
    --build-arg "COREDNS_TAG=$COREDNS_VERSION" -t "$tag-build" \
    --file "$ctx/Dockerfile" "$ctx" >"$KERASJOB_RUN/kind/node-image.log" 2>&1 \
    || { tail -n 30 "$KERASJOB_RUN/kind/node-image.log" >&2; die "building $tag failed; see $KERASJOB_RUN/kind/node-image.log"; }
  cid="$("$DOCKER" run -d --privileged --network none -v "$ctx/images:/kind/images:ro" \
    --entrypoint /bin/sleep "$tag-build" infinity)"
  "$DOCKER" exec "$cid" /kind/bin/import-images >>"$KERASJOB_RUN/kind/node-image.log" 2>&1 \
    || { "$DOCKER" rm -f "$cid" >/dev/null; die "importing the images into the node image failed"; }
  "$DOCKER" commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint"]' --change 'CMD ["/sbin/init"]' \
    "$cid" "$tag" >/dev/null
  "$DOCKER" rm -f "$cid" >/dev/null
  "$DOCKER" rmi "$tag-build" >/dev/null
  rm -rf "$ctx"
  local old
  for old in $("$DOCKER" image ls --format '{{.Repository}}:{{.Tag}}' "$NODE_REPO"); do
    [ "$old" = "$tag" ] || "$DOCKER" rmi "$old" >/dev/null 2>&1 || true
  done
}

main() {
  local name_only=0
  case "${1:-}" in
    "") ;;
    --name) name_only=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (usage: node-image.sh [--name])" ;;
  esac
  use_docker_daemon
  # The classic builder: the private daemon has no bridge for BuildKit (hack/images/README.md).
  export DOCKER_BUILDKIT=0
  if [ "$name_only" = 0 ]; then
    "$REPO_ROOT/hack/cluster/build.sh" >&2
    "$KIND_DIR/build.sh" >&2
    DOCKER="$DOCKER" "$REPO_ROOT/hack/images/base.sh" >&2
  fi
  local base tag
  base="$(rootfs_image)"
  tag="$NODE_REPO:$KUBE_VERSION-$(recipe_hash "$("$DOCKER" image inspect -f '{{.Id}}' "$base")")"
  if [ "$name_only" = 1 ] || "$DOCKER" image inspect "$tag" >/dev/null 2>&1; then
    echo "$tag"
    return 0
  fi
  mkdir -p "$IMAGES_CACHE" "$KERASJOB_RUN/kind"
  exec 9>"$IMAGES_CACHE/.build.lock"
  flock -w 1800 9 || die "the image build lock $IMAGES_CACHE/.build.lock is still held after 30 min"
  local t0=$SECONDS
  build_node "$base" "$tag"
  log "built $tag in $((SECONDS - t0)) s"
  echo "$tag"
}

main "$@"
