#!/usr/bin/env bash
# Build the pinned etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
# helm, kwok, kwokctl, kubelet, kube-proxy, containerd (+ shim, ctr) and CoreDNS from the Go module proxy into $KERASJOB_CACHE/bin/<version>-<pin hash>/.
#
# The pins live in the committed wrapper modules under hack/cluster/gomod/*/go.mod (+ go.sum).
# Idempotent: exits at once when every binary of the pinned set is already there.
#
#   hack/cluster/build.sh                 build (or confirm) the pinned binaries
#   hack/cluster/build.sh --bin-dir       print the binary directory and exit
#   hack/cluster/build.sh --pin-kube vX.Y.Z   re-pin Kubernetes (rewrites gomod/kube/go.mod)
#
# Go caches stay in Go's defaults (GOMODCACHE ~/go/pkg/mod, GOCACHE ~/.cache/go-build) unless
# set in the environment. GO=/path/to/go picks the toolchain (default: go on PATH, then
# /usr/local/go/bin/go); it must be Go >= 1.26.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

go_env() {
  export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
  export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"
}

pin_kube() {
  local v="$1" minor="${1#v1.}"
  [[ "$v" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "--pin-kube wants a release like v1.36.3, got '$v'"
  local gobin; gobin="$(find_go)" || die "$NO_GO"
  go_env; export GOFLAGS="-mod=mod -buildvcs=false"
  local mod; mod="$(mktemp)"
  curl -fsSL "${GOPROXY%%,*}/k8s.io/kubernetes/@v/$v.mod" -o "$mod" \
    || die "cannot fetch k8s.io/kubernetes@$v go.mod from ${GOPROXY%%,*}"
  {
    echo "// Wrapper module: builds the pinned Kubernetes control-plane binaries and kubectl."
    echo "// k8s.io/kubernetes replaces its staging modules with local paths, so each one is"
    echo "// replaced here by its published v0.<minor>.<patch> release."
    echo "// Regenerate with: hack/cluster/build.sh --pin-kube vX.Y.Z"
    echo "module kerasjob.dev/hack/cluster/kube"; echo; echo "go 1.26.0"; echo
    echo "require k8s.io/kubernetes $v"; echo; echo "replace ("
    grep -E '=> \./staging' "$mod" | awk -v r="v0.$minor" '{print "\t" $1 " => " $1 " " r}'
    echo ")"
  } > "$GOMOD_DIR/kube/go.mod"
  rm -f "$mod" "$GOMOD_DIR/kube/go.sum"
  (cd "$GOMOD_DIR/kube" && "$gobin" mod tidy) || die "go mod tidy failed for Kubernetes $v"
  log "pinned Kubernetes $v; review and commit hack/cluster/gomod/kube/go.{mod,sum}"
}

case "${1:-}" in
  --bin-dir) bin_dir; exit 0 ;;
  --pin-kube) pin_kube "${2:-}"; exit 0 ;;
  "") ;;
  *) die "unknown argument '$1' (usage: build.sh [--bin-dir | --pin-kube vX.Y.Z])" ;;
esac

BIN="$(bin_dir)"
all_present() {
  local b
  [ -f "$BIN/.complete" ] || return 1
  for b in "${BINARIES[@]}"; do [ -x "$BIN/$b" ] || return 1; done
}

if all_present; then
  log "binaries up to date: $BIN (Kubernetes $KUBE_VERSION, etcd $ETCD_VERSION, helm $HELM_VERSION, kwok $KWOK_VERSION)"
  exit 0
fi
[ -z "${KERASJOB_BIN_DIR:-}" ] || die "KERASJOB_BIN_DIR=$KERASJOB_BIN_DIR lacks some of: ${BINARIES[*]} (unset it to build the pinned set)"

GOBIN_="$(find_go)" || die "Go >= 1.26 not found: install it (https://go.dev/dl) or set GO=/path/to/go, then rerun 'make binaries'"
go_env

mkdir -p "$KERASJOB_CACHE/bin"
# Several checkouts (or parallel `make test` runs) may build at once: one builds, others wait.
exec 9>"$KERASJOB_CACHE/bin/.build.lock"
if ! flock -n 9; then
  log "another build is running; waiting for it (up to 60 min)"
  flock -w 3600 9 || die "timed out waiting for $KERASJOB_CACHE/bin/.build.lock; is a stale build running?"
  if all_present; then log "binaries up to date: $BIN"; exit 0; fi
fi

mkdir -p "$BIN"
log "building Kubernetes $KUBE_VERSION, etcd $ETCD_VERSION, helm $HELM_VERSION, kwok $KWOK_VERSION with $("$GOBIN_" env GOVERSION) into $BIN"
log "(a cold build downloads ~0.5 GB of modules and compiles for ~10 min on 2 cores; later builds are cached)"

build_start=$SECONDS
# build MODULE_DIR LDFLAGS PACKAGE...: one `go build` per wrapper module, several commands at once.
build() {
  local dir="$1" ldflags="$2"; shift 2
  local t0=$SECONDS tmp="$BIN/.tmp-$dir"
  rm -rf "$tmp"; mkdir -p "$tmp"
  local out="$tmp/"
  [ "$dir" != etcd ] || out="$tmp/etcd"    # the etcd main package's path ends in /v3
  # Go's "go: downloading MODULE" lines (hundreds on a cold build) are left out; errors are not.
  if ! (cd "$GOMOD_DIR/$dir" && "$GOBIN_" build -trimpath -ldflags "-s -w $ldflags" -o "$out" "$@" \
    2> >(grep -v '^go: downloading ' >&2)); then
    rm -rf "$tmp"
    die "go build failed for $dir ($*); see the errors above. Check network access to \$GOPROXY and disk space, then rerun 'make binaries'"
  fi
  mv -f "$tmp"/* "$BIN/"; rmdir "$tmp"
  log "built $dir in $((SECONDS - t0)) s"
}

kube_minor="${KUBE_VERSION#v1.}"; kube_minor="${kube_minor%%.*}"
kube_ld=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ld+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$kube_minor"
  kube_ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
build kube "$kube_ld" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl \
  k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
build etcd "" go.etcd.io/etcd/server/v3
build helm "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
  -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$kube_minor \
  -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$kube_minor" \
  helm.sh/helm/v3/cmd/helm
build kwok "-X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" \
  sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl
# The real node's runtime and cluster DNS (hack/cluster/node.sh).
build containerd "-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
  github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
  github.com/containerd/containerd/v2/cmd/ctr
build coredns "" github.com/coredns/coredns

# Sanity: the binaries run and report the pinned versions.
got="$(reports_version "$BIN/kube-apiserver" "$KUBE_VERSION")" \
  || die "built kube-apiserver does not report $KUBE_VERSION: $got"
got="$(reports_version "$BIN/etcd" "${ETCD_VERSION#v}")" \
  || die "built etcd does not report $ETCD_VERSION: $got"
for b in "${BINARIES[@]}"; do [ -x "$BIN/$b" ] || die "build finished but $BIN/$b is missing"; done
{
  echo "kubernetes=$KUBE_VERSION etcd=$ETCD_VERSION helm=$HELM_VERSION kwok=$KWOK_VERSION"
  echo "go=$("$GOBIN_" env GOVERSION) built=$(date -u +%FT%TZ) seconds=$((SECONDS - build_start))"
} > "$BIN/.complete"
log "all binaries built in $((SECONDS - build_start)) s: $BIN"
