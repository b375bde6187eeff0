#!/usr/bin/env bash
# Build the kind CLI and kubeadm from the Go module proxy into the binary cache.
#
#   hack/kind/build.sh               build (or confirm) both; idempotent, seconds when cached
#   hack/kind/build.sh --bin NAME    print the path of kind or kubeadm
#
# The pins are the wrapper modules hack/kind/gomod/kind (sigs.k8s.io/kind) and
# hack/kind/gomod/kubeadm (k8s.io/kubernetes at the local cluster's release,
# hack/cluster/gomod/kube). Each is cached in $KERASJOB_CACHE/bin/<name>-<version>-<hash of its
# go.mod + go.sum>/, like the other opt-in components (hack/cluster/lib.sh: addon_build), so
# the shared binary directory of `make binaries` does not move. kubeadm carries the same
# version stamps as the kubelet of `make binaries` (kubeadm checks the kubelet's version).
set -euo pipefail
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../cluster/lib.sh"

KIND_GOMOD="$REPO_ROOT/hack/kind/gomod/kind"
KUBEADM_GOMOD="$REPO_ROOT/hack/kind/gomod/kubeadm"
KIND_VERSION="$(pinned_version ../../kind/gomod/kind sigs.k8s.io/kind)"
KUBEADM_VERSION="$(pinned_version ../../kind/gomod/kubeadm k8s.io/kubernetes)"
BIN_KIND="$(addon_bin kind "$KIND_GOMOD" "$KIND_VERSION")"
BIN_KUBEADM="$(addon_bin kubeadm "$KUBEADM_GOMOD" "$KUBEADM_VERSION")"

build() {
  [ "$KUBEADM_VERSION" = "$KUBE_VERSION" ] \
    || die "hack/kind/gomod/kubeadm pins Kubernetes $KUBEADM_VERSION, the local cluster $KUBE_VERSION: re-pin it (see its go.mod)"
  addon_build kind "$KIND_GOMOD" "$BIN_KIND" sigs.k8s.io/kind -ldflags "-s -w"
  local minor="${KUBE_VERSION#v1.}" ld="-s -w" p
  minor="${minor%%.*}"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  addon_build kubeadm "$KUBEADM_GOMOD" "$BIN_KUBEADM" k8s.io/kubernetes/cmd/kubeadm -ldflags "$ld"
}

case "${1:-}" in
  "") build ;;
  --bin)
    case "${2:-}" in
      kind) echo "$BIN_KIND" ;;
      kubeadm) echo "$BIN_KUBEADM" ;;
      *) die "--bin wants kind or kubeadm, not '${2:-}'" ;;
    esac ;;
  *) die "unknown argument '$1' (usage: build.sh [--bin kind|kubeadm])" ;;
esac
