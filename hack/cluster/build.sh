#!/usr/bin/env bash
# Build the pinned binaries of the local cluster from the Go module proxy into
# $KERASJOB_CACHE/bin/<version>-<pin hash>/, one named set at a time (lib.sh lists them):
#
#   demo  what `make demo` runs: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
#         kubectl, kwok (up.sh), kubelet, kube-proxy, containerd (+ shim, ctr), CoreDNS
#         (node.sh) and helm (the demo installs the chart with it)
#   all   the demo's and kwokctl: what `make binaries` (make test, the benchmarks) builds
#
# The pins live in the committed wrapper modules under hack/cluster/gomod/*/go.mod (+ go.sum);
# CoreDNS is our own main package there (gomod/coredns/coredns) with only the plugins our
# Corefiles use. Idempotent: exits at once when the set is built and checked (a marker per
# set); a binary already in the directory (put there by rename after its build) is never
# rebuilt, so `all` after `demo` builds kwokctl only.
#
#   hack/cluster/build.sh [all]           build (or confirm) every binary
#   hack/cluster/build.sh demo            build (or confirm) the demo's binaries only
#   hack/cluster/build.sh --bin-dir       print the binary directory and exit
#   hack/cluster/build.sh --binaries SET  print SET's binaries, one a line
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

# set_binaries SET: SET's binaries, one a line; 1 for an unknown set.
set_binaries() {
  case "$1" in
    demo) printf '%s\n' "${DEMO_BINARIES[@]}" ;;
    all) printf '%s\n' "${BINARIES[@]}" ;;
    *) return 1 ;;
  esac
}
USAGE="usage: build.sh [demo | all | --bin-dir | --binaries demo|all | --pin-kube vX.Y.Z]"

SET=all
case "${1:-}" in
  --bin-dir) bin_dir; exit 0 ;;
  --binaries) set_binaries "${2:-}" || die "unknown set '${2:-}' ($USAGE)"; exit 0 ;;
  --pin-kube) pin_kube "${2:-}"; exit 0 ;;
  demo | all) SET="$1" ;;
  "") ;;
  *) die "unknown argument '$1' ($USAGE)" ;;
esac
mapfile -t WANT < <(set_binaries "$SET")

BIN="$(bin_dir)"
# The marker of a set built and checked: .complete for all (as before sets), .complete-demo.
# Sets are nested, so all's marker stands for the demo's too. A binary alone proves nothing:
# a set is up to date only with its marker, written after its sanity checks passed.
marker() { if [ "$1" = all ]; then echo "$BIN/.complete"; else echo "$BIN/.complete-$1"; fi; }
up_to_date() {
  local b
  [ -f "$(marker "$SET")" ] || [ -f "$(marker all)" ] || return 1
  for b in "${WANT[@]}"; do [ -x "$BIN/$b" ] || return 1; done
}
versions="Kubernetes $KUBE_VERSION, etcd $ETCD_VERSION, helm $HELM_VERSION, kwok $KWOK_VERSION, containerd $CONTAINERD_VERSION, CoreDNS $COREDNS_VERSION"

if up_to_date; then
  log "binaries ($SET) up to date: $BIN ($versions)"
  exit 0
fi
[ -z "${KERASJOB_BIN_DIR:-}" ] || die "KERASJOB_BIN_DIR=$KERASJOB_BIN_DIR lacks some of ($SET, or its marker $(basename "$(marker "$SET")")): ${WANT[*]} (unset it to build the pinned set)"

GOBIN_="$(find_go)" || die "Go >= 1.26 not found: install it (https://go.dev/dl) or set GO=/path/to/go, then rerun 'make binaries'"
go_env

mkdir -p "$KERASJOB_CACHE/bin"
# Several checkouts (or parallel `make test` runs) may build at once: one builds, others wait.
exec 9>"$KERASJOB_CACHE/bin/.build.lock"
if ! flock -n 9; then
  log "another build is running; waiting for it (up to 60 min)"
  flock -w 3600 9 || die "timed out waiting for $KERASJOB_CACHE/bin/.build.lock; is a stale build running?"
  if up_to_date; then log "binaries ($SET) up to date: $BIN"; exit 0; fi
fi

mkdir -p "$BIN"
missing=()
for b in "${WANT[@]}"; do [ -x "$BIN/$b" ] || missing+=("$b"); done
if [ ${#missing[@]} = 0 ]; then
  log "the $SET set is in $BIN; checking it"
else
  log "building the $SET set ($versions) with $("$GOBIN_" env GOVERSION) into $BIN: ${missing[*]}$([ ${#missing[@]} = ${#WANT[@]} ] || echo " (the rest is there)")"
  [ -x "$BIN/kube-apiserver" ] \
    || log "(a cold build downloads ~0.5 GB of modules and compiles for ~10 min on 2 cores; later builds are cached)"
fi

build_start=$SECONDS
# wanted NAME: 0 when NAME is in the set and not built yet.
wanted() { [[ " ${missing[*]} " == *" $1 "* ]]; }
# build MODULE_DIR LDFLAGS NAME=PACKAGE...: one `go build` per wrapper module of the packages
# whose binaries the set wants and the directory lacks (none: no build); several at once.
build() {
  local dir="$1" ldflags="$2" arg pkgs=() names=()
  shift 2
  for arg in "$@"; do
    wanted "${arg%%=*}" || continue
    names+=("${arg%%=*}"); pkgs+=("${arg#*=}")
  done
  [ ${#pkgs[@]} -gt 0 ] || return 0
  local t0=$SECONDS tmp="$BIN/.tmp-$dir"
  rm -rf "$tmp"; mkdir -p "$tmp"
  local out="$tmp/"
  [ "$dir" != etcd ] || out="$tmp/etcd"    # the etcd main package's path ends in /v3
  # Go's "go: downloading MODULE" lines (hundreds on a cold build) are left out; errors are not.
  if ! (cd "$GOMOD_DIR/$dir" && "$GOBIN_" build -trimpath -ldflags "-s -w $ldflags" -o "$out" "${pkgs[@]}" \
    2> >(grep -v '^go: downloading ' >&2)); then
    rm -rf "$tmp"
    die "go build failed for $dir (${pkgs[*]}); see the errors above. Check network access to \$GOPROXY and disk space, then rerun 'make binaries'"
  fi
  # Each binary lands by rename: one in $BIN is whole.
  mv -f "$tmp"/* "$BIN/"; rmdir "$tmp"
  log "built $dir (${names[*]}) in $((SECONDS - t0)) s"
}

kube_minor="${KUBE_VERSION#v1.}"; kube_minor="${kube_minor%%.*}"
kube_ld=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ld+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$kube_minor"
  kube_ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
build kube "$kube_ld" \
  kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
  kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler kubectl=k8s.io/kubernetes/cmd/kubectl \
  kubelet=k8s.io/kubernetes/cmd/kubelet kube-proxy=k8s.io/kubernetes/cmd/kube-proxy
build etcd "" etcd=go.etcd.io/etcd/server/v3
build helm "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
  -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$kube_minor \
  -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$kube_minor" \
  helm=helm.sh/helm/v3/cmd/helm
build kwok "-X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" \
  kwok=sigs.k8s.io/kwok/cmd/kwok kwokctl=sigs.k8s.io/kwok/cmd/kwokctl
# The real node's runtime and cluster DNS (hack/cluster/node.sh).
build containerd "-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
  containerd=github.com/containerd/containerd/v2/cmd/containerd \
  containerd-shim-runc-v2=github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
  ctr=github.com/containerd/containerd/v2/cmd/ctr
build coredns "" coredns=kerasjob.dev/hack/cluster/coredns/coredns
built_s=$((SECONDS - build_start))

# dns_txt PORT NAME: "RCODE TEXT..." of a TXT query for NAME to 127.0.0.1:PORT over UDP
# (exit 1 when no answer comes within a second).
dns_txt() {
  python3 - "$1" "$2" <<'EOF'
import socket, struct, sys
port, name = int(sys.argv[1]), sys.argv[2]
question = b"".join(bytes([len(p)]) + p.encode() for p in name.strip(".").split(".")) + b"\0"
question += struct.pack(">HH", 16, 1)  # TXT, IN
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    s.settimeout(1)
    s.sendto(struct.pack(">6H", 0x6B6A, 0x0100, 1, 0, 0, 0) + question, ("127.0.0.1", port))
    try:
        reply = s.recv(4096)
    except OSError:
        sys.exit(1)
rcode, count = reply[3] & 0xF, struct.unpack(">H", reply[6:8])[0]
at, texts = 12 + len(question), []  # the answers follow the question, echoed
for _ in range(count):
    while reply[at] and reply[at] < 0xC0:  # the owner name: labels, or a pointer
        at += reply[at] + 1
    at += 2 if reply[at] >= 0xC0 else 1
    rtype, _, _, size = struct.unpack(">HHIH", reply[at : at + 10])
    data, at = reply[at + 10 : at + 10 + size], at + 10 + size
    while rtype == 16 and data:  # TXT: length-prefixed strings
        texts.append(data[1 : 1 + data[0]].decode())
        data = data[1 + data[0] :]
print(rcode, *texts)
EOF
}
# free_ports N: N TCP ports free on 127.0.0.1 now (a UDP bind on the DNS one is likely free too).
free_ports() {
  python3 -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
for s in socks: s.close()' "$1"
}

# check_coredns: the built CoreDNS has every plugin our Corefiles name (the node's and
# kubeadm's, which the kind node runs), and serves the node's Corefile (lib.sh node_corefile)
# on loopback: health answers, and the kubernetes plugin answers dns-version.cluster.local
# (TXT 1.1.0, served before it reaches an API server: the one in its kubeconfig, context
# "local" as in node.sh's, is a closed port).
check_coredns() {
  local plugins p want dir port hport rport aport pid answer="" i
  plugins="$("$BIN/coredns" -plugins 2>&1)" || die "built coredns -plugins failed: $plugins"
  for p in bind cache errors forward health kubernetes loadbalance loop prometheus ready reload; do
    [[ $'\n'"$plugins"$'\n' == *$'\n'"$p"$'\n'* ]] \
      || die "built coredns lacks the $p plugin (gomod/coredns/coredns/main.go)"
  done
  dir="$(mktemp -d)"
  read -r port hport rport aport < <(free_ports 4)
  printf 'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://127.0.0.1:%s"}}]\ncontexts: [{name: local, context: {cluster: c, user: u}}]\ncurrent-context: local\nusers: [{name: u, user: {}}]\n' \
    "$aport" > "$dir/kubeconfig"
  node_corefile 127.0.0.1 "$port" "$hport" "$rport" "$dir/kubeconfig" > "$dir/Corefile"
  "$BIN/coredns" -conf "$dir/Corefile" > "$dir/log" 2>&1 &
  pid=$!
  # The kubernetes plugin waits up to 5 s for its API server before it serves.
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    answer="$(dns_txt "$port" dns-version.cluster.local 2>/dev/null)" && break
    sleep 0.2
  done
  want="$(curl -fsS --max-time 2 "http://127.0.0.1:$hport/health" 2>&1)" || want="no health: $want"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  if [ "$answer" != "0 1.1.0" ] || [ "$want" != OK ]; then
    sed 's/^/  coredns: /' "$dir/log" >&2
    rm -rf "$dir"
    die "built coredns does not serve the node's Corefile: dns-version.cluster.local TXT gave '${answer:-no answer}' (want '0 1.1.0'), /health '$want' (want OK)"
  fi
  rm -rf "$dir"
}

# Sanity: the binaries run and report the pinned versions; CoreDNS serves our Corefile.
t0=$SECONDS
got="$(reports_version "$BIN/kube-apiserver" "$KUBE_VERSION")" \
  || die "built kube-apiserver does not report $KUBE_VERSION: $got"
got="$(reports_version "$BIN/etcd" "${ETCD_VERSION#v}")" \
  || die "built etcd does not report $ETCD_VERSION: $got"
got="$(reports_version "$BIN/coredns" "CoreDNS-${COREDNS_VERSION#v}")" \
  || die "built coredns does not report $COREDNS_VERSION: $got"
for b in "${WANT[@]}"; do [ -x "$BIN/$b" ] || die "build finished but $BIN/$b is missing"; done
check_coredns
log "checked the $SET set in $((SECONDS - t0)) s (versions; CoreDNS answered over the node's Corefile)"
{
  echo "set=$SET: ${WANT[*]}"
  echo "kubernetes=$KUBE_VERSION etcd=$ETCD_VERSION helm=$HELM_VERSION kwok=$KWOK_VERSION containerd=$CONTAINERD_VERSION coredns=$COREDNS_VERSION"
  echo "go=$("$GOBIN_" env GOVERSION) built=$(date -u +%FT%TZ) seconds=$((SECONDS - build_start)) (go build ${built_s} s)"
} > "$(marker "$SET")"
log "the $SET set built in $((SECONDS - build_start)) s (go build ${built_s} s): $BIN"
