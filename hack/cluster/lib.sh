# shellcheck shell=bash disable=SC2034  # sourced: the scripts that source it use these variables
# Shared settings for hack/cluster/*.sh. Source it; it defines variables and functions only.
#
# Environment overrides (all optional):
#   KERASJOB_CACHE   binary cache root            (default ~/.cache/kerasjob)
#   KERASJOB_RUN     runtime state root           (default <repo>/.run)
#   KERASJOB_BIN_DIR use prebuilt binaries from this directory instead of the pinned build
#   ETCD_PORT ETCD_PEER_PORT APISERVER_PORT KCM_PORT SCHEDULER_PORT KWOK_PORT   (see below)
#   KWOK_NODES       number of fake KWOK nodes    (default 4)
#   APISERVER_BIND_ADDRESS / APISERVER_ADVERTISE_ADDRESS   (default 127.0.0.1)
#   CLUSTER_READY_TIMEOUT  seconds up.sh waits for readiness (default 90)
#   KUBE_FEATURE_GATES     --feature-gates of the API server, controller manager and scheduler
#                          (default: native gang scheduling on; empty: none)
#   KUBE_RUNTIME_CONFIG    --runtime-config of the API server (default: scheduling.k8s.io/v1alpha2)

CLUSTER_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$CLUSTER_DIR/../.." && pwd)"
GOMOD_DIR="$CLUSTER_DIR/gomod"

KERASJOB_CACHE="${KERASJOB_CACHE:-$HOME/.cache/kerasjob}"
KERASJOB_RUN="${KERASJOB_RUN:-$REPO_ROOT/.run}"
STATE_DIR="$KERASJOB_RUN/cluster"

# Fixed default ports on 127.0.0.1, chosen away from the usual ones (2379, 6443, 10257...)
# so the local cluster can run next to another one. Override any of them from the environment.
ETCD_PORT="${ETCD_PORT:-23790}"
ETCD_PEER_PORT="${ETCD_PEER_PORT:-23800}"
APISERVER_PORT="${APISERVER_PORT:-16443}"
KCM_PORT="${KCM_PORT:-20257}"
SCHEDULER_PORT="${SCHEDULER_PORT:-20259}"
KWOK_PORT="${KWOK_PORT:-20247}"
KWOK_NODES="${KWOK_NODES:-4}"
# The real node (hack/cluster/node.sh): on unless KERASJOB_NODE=0 (then: KWOK nodes only).
KERASJOB_NODE="${KERASJOB_NODE:-1}"
NODE_NAME="${NODE_NAME:-kerasjob-node}"
NODE_BRIDGE="${NODE_BRIDGE:-kjbr0}"
NODE_POD_CIDR="${NODE_POD_CIDR:-10.213.0.0/24}"
NODE_IP="${NODE_IP:-10.213.0.1}"          # on the bridge: the Node's InternalIP
# The bridge's own MAC, fixed (locally administered, from NODE_IP): a Linux bridge otherwise
# takes the lowest MAC of its ports, so it changed whenever that Pod left, and every other
# Pod's neighbour entry for its gateway went on naming the gone MAC: their traffic through
# the gateway stopped until the entry expired (23 s measured; node.sh network()).
bridge_mac() { local _a b c d; IFS=. read -r _a b c d <<< "$NODE_IP"; printf '02:6b:6a:%02x:%02x:%02x' "$b" "$c" "$d"; }
NODE_BRIDGE_MAC="${NODE_BRIDGE_MAC:-$(bridge_mac)}"
NODE_CGROUP="${NODE_CGROUP:-kerasjob-$NODE_BRIDGE}"
NODE_DIR="$KERASJOB_RUN/node"
SERVICE_CIDR="10.96.0.0/16"
DNS_IP="10.96.0.10"
KUBELET_PORT="${KUBELET_PORT:-20250}"
KUBELET_HEALTHZ_PORT="${KUBELET_HEALTHZ_PORT:-20248}"
KUBE_PROXY_HEALTHZ_PORT="${KUBE_PROXY_HEALTHZ_PORT:-20256}"
KUBE_PROXY_METRICS_PORT="${KUBE_PROXY_METRICS_PORT:-20249}"
COREDNS_PORT="${COREDNS_PORT:-1053}"
COREDNS_HEALTH_PORT="${COREDNS_HEALTH_PORT:-20280}"
COREDNS_READY_PORT="${COREDNS_READY_PORT:-20281}"
CNI_BIN_DIR="${CNI_BIN_DIR:-/usr/lib/cni}"
PAUSE_IMAGE="kerasjob.local/pause:dev"

# Kubernetes 1.36's native gang scheduling is alpha: the Workload and PodGroup API
# (scheduling.k8s.io/v1alpha2, off unless the API server serves it) and the GenericWorkload +
# GangScheduling gates on the API server (Pod spec.schedulingGroup, the PodGroup admission),
# the controller manager (the PodGroup protection controller) and the scheduler (the
# GangScheduling plugin). On by default: Pods without spec.schedulingGroup are scheduled as
# before. Set either variable to "" for a cluster without them (a `-` default, not `:-`).
KUBE_FEATURE_GATES="${KUBE_FEATURE_GATES-GenericWorkload=true,GangScheduling=true}"
KUBE_RUNTIME_CONFIG="${KUBE_RUNTIME_CONFIG-scheduling.k8s.io/v1alpha2=true}"
# What a running cluster was started with ($STATE_DIR/settings): up.sh restarts one started
# with other gates instead of reusing it.
cluster_settings() { printf 'feature-gates=%s\nruntime-config=%s\n' "$KUBE_FEATURE_GATES" "$KUBE_RUNTIME_CONFIG"; }

# The API server listens on APISERVER_BIND_ADDRESS and advertises APISERVER_ADVERTISE_ADDRESS
# as the `kubernetes` Service endpoint. With the real node both are the node's bridge address,
# so Pods reach the API server through the `kubernetes` Service (in-cluster config), and
# nothing listens outside this machine; without it, loopback.
if [ "$KERASJOB_NODE" = 1 ]; then _api_default="$NODE_IP"; else _api_default=127.0.0.1; fi
APISERVER_BIND_ADDRESS="${APISERVER_BIND_ADDRESS:-$_api_default}"
APISERVER_ADVERTISE_ADDRESS="${APISERVER_ADVERTISE_ADDRESS:-$_api_default}"
case "$APISERVER_BIND_ADDRESS" in
  0.0.0.0) API_SERVER_URL="https://127.0.0.1:$APISERVER_PORT" ;;
  *) API_SERVER_URL="https://$APISERVER_BIND_ADDRESS:$APISERVER_PORT" ;;
esac

# The components up.sh may start, in start order (down.sh stops them in reverse); KWOK's
# controller only for KWOK nodes (UP_COMPONENTS: what up.sh starts with these settings).
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
kwok_runs() { [ "$KWOK_NODES" != 0 ]; }
UP_COMPONENTS=("${COMPONENTS[@]:0:4}")
! kwok_runs || UP_COMPONENTS+=(kwok)
# Optional processes started into the same state directory after up.sh (hack/cluster/kueue.sh);
# down.sh stops them with the control plane.
ADDON_COMPONENTS=(kueue)
# The real node's processes (node.sh starts and stops them; down.sh also finds strays).
NODE_COMPONENTS=(containerd kubelet kube-proxy coredns)
# Binaries build.sh produces, in nested sets (hack/cluster/build.sh [demo|all]):
# the cluster's: what up.sh and node.sh run or call without KWOK nodes (the control plane,
# kubectl, the real node's containerd, kubelet, kube-proxy, CoreDNS); the demo's: the
# cluster's and helm (dev/kerasjob_dev/demo.py installs the chart with it; it starts no KWOK
# node), all `make demo` builds; all: the demo's, kwok (KWOK nodes) and kwokctl, what `make
# binaries` (make test, the benchmarks) builds.
CLUSTER_BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl
                  kubelet kube-proxy containerd containerd-shim-runc-v2 ctr coredns)
DEMO_BINARIES=("${CLUSTER_BINARIES[@]}" helm)
BINARIES=("${DEMO_BINARIES[@]}" kwok kwokctl)

die() { echo "$(basename "$0"): $*" >&2; exit 1; }
log() { echo "$(basename "$0"): $*" >&2; }
# reports_version BINARY TEXT: BINARY --version prints TEXT (its first line is printed when
# not). The output is captured whole before it is matched: `BINARY --version | grep -q TEXT`
# under pipefail fails when grep exits at its match while the binary still writes (SIGPIPE;
# etcd's four writes failed 8-11 % of such checks). tests/unit/test_shell_scripts.py.
reports_version() {
  local out
  out="$("$1" --version 2>&1 || true)"
  [[ "$out" == *"$2"* ]] && return 0
  echo "${out%%$'\n'*}"
  return 1
}

# Version of module $2 required by wrapper module $1 (read from the committed go.mod).
pinned_version() {
  awk -v m="$2" '($1 == m || ($1 == "require" && $2 == m)) && $0 !~ /=>/ {print $NF; exit}' \
    "$GOMOD_DIR/$1/go.mod"
}

KUBE_VERSION="$(pinned_version kube k8s.io/kubernetes)"
ETCD_VERSION="$(pinned_version etcd go.etcd.io/etcd/server/v3)"
HELM_VERSION="$(pinned_version helm helm.sh/helm/v3)"
KWOK_VERSION="$(pinned_version kwok sigs.k8s.io/kwok)"
CONTAINERD_VERSION="$(pinned_version containerd github.com/containerd/containerd/v2)"
COREDNS_VERSION="$(pinned_version coredns github.com/coredns/coredns)"

# The binary directory is keyed by the Kubernetes version and a hash of every pin
# (go.mod + go.sum of the wrapper modules), of their Go files (tools.go, CoreDNS's main
# package with its plugin list) and of the build recipe revision, so changing any of them
# builds into a fresh directory and old ones stay usable until removed.
# Recipe 2: CoreDNS with our plugins only; a complete set marked per set (build.sh).
BUILD_RECIPE_REV=2
pin_hash() {
  local f
  {
    echo "recipe=$BUILD_RECIPE_REV"
    cat "$GOMOD_DIR"/*/go.mod "$GOMOD_DIR"/*/go.sum
    while IFS= read -r f; do echo "${f#"$GOMOD_DIR"/}"; cat "$f"; done \
      < <(find "$GOMOD_DIR" -name '*.go' | LC_ALL=C sort)
  } | sha256sum | cut -c1-12
}

# node_corefile BIND PORT HEALTH_PORT READY_PORT KUBECONFIG: the real node's Corefile (node.sh
# runs CoreDNS with it; build.sh's sanity check serves it on loopback). CoreDNS is built with
# the plugins it and kubeadm's Corefile (the kind node) name only: a directive added here must
# be added to gomod/coredns/coredns/main.go too (tests/unit/test_coredns_plugins.py).
node_corefile() {
  cat <<EOF
.:$2 {
    bind $1
    errors
    health 127.0.0.1:$3
    ready 127.0.0.1:$4
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $5 local
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    cache 5
}
EOF
}
bin_dir() {
  if [ -n "${KERASJOB_BIN_DIR:-}" ]; then echo "$KERASJOB_BIN_DIR"; return; fi
  echo "$KERASJOB_CACHE/bin/$KUBE_VERSION-$(pin_hash)"
}

# Where up.sh and node.sh keep certificates, logs and pid files.
PKI="$STATE_DIR/pki"
LOGS="$STATE_DIR/logs"
PIDS="$STATE_DIR/pids"

# launch NAME BINARY ARGS...: start a component in its own session (setsid), so down.sh can
# stop it and all its children by process group; its pid (the session leader's: setsid execs
# in place here) in pids/, its output in logs/. Daemons must not inherit the lock fds 8 and 9.
launch() {
  local name="$1"; shift
  printf '%s\0' "$@" > "$PIDS/$name.cmd"  # for restart.sh: the same command again
  setsid "$@" >> "$LOGS/$name.log" 2>&1 < /dev/null 8>&- 9>&- &
  echo $! > "$PIDS/$name.pid"
}
# alive NAME: 0 while the component started by launch runs.
alive() { local p; p="$(cat "$PIDS/$1.pid" 2>/dev/null)" && [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

# stop_proc NAME [GRACE]: TERM the process group launch started as NAME, KILL it after GRACE
# seconds (default 5); forget its pid file.
stop_proc() {
  local pid i
  pid="$(cat "$PIDS/$1.pid" 2>/dev/null)" || return 0
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || { rm -f "$PIDS/$1.pid"; return 0; }
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < ${2:-5} * 10; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$PIDS/$1.pid"
}

# 0 when something listens on 127.0.0.1:$1 (TCP).
port_in_use() {
  if command -v ss >/dev/null 2>&1; then
    [ -n "$(ss -Htln "sport = :$1" 2>/dev/null)" ]
  else
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
  fi
}

# Serialize up.sh/down.sh on one state directory (several test sessions may share a checkout).
# up.sh calls down.sh while holding it; KERASJOB_CLUSTER_LOCKED tells the nested call.
# Started daemons must not inherit fd 8 (see launch in up.sh), or they would hold the lock.
cluster_lock() {
  [ -z "${KERASJOB_CLUSTER_LOCKED:-}" ] || return 0
  mkdir -p "$KERASJOB_RUN"
  exec 8>"$KERASJOB_RUN/.cluster-scripts.lock"
  if ! flock -n 8; then
    log "waiting for another up.sh/down.sh on $STATE_DIR"
    flock -w 300 8 || die "another up.sh/down.sh on $STATE_DIR held its lock for 5 min; is one stuck?"
  fi
  export KERASJOB_CLUSTER_LOCKED=1
}

# find_go: the Go toolchain to build with -- $GO, go on PATH, /usr/local/go/bin/go: the first
# that is Go >= 1.26 (our pinned modules' floor). Prints its path; returns 1 if none is.
find_go() {
  local cand v minor
  for cand in "${GO:-}" "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go; do
    [ -n "$cand" ] && [ -x "$cand" ] || continue
    v="$("$cand" env GOVERSION 2>/dev/null)" || continue     # e.g. go1.26.8
    minor="${v#go1.}"; minor="${minor%%.*}"; minor="${minor%%[!0-9]*}"
    if [[ "$v" == go1.* ]] && [ -n "$minor" ] && [ "$minor" -ge 26 ]; then
      echo "$cand"; return 0
    fi
  done
  return 1
}
NO_GO="Go >= 1.26 not found: install it (https://go.dev/dl) or set GO=/path/to/go"

# go_build GOMOD_DIR OUT PACKAGE [GO BUILD FLAGS...]: build PACKAGE of the module pinned in
# GOMOD_DIR (its go.mod/go.sum, read-only) into the file OUT, statically (CGO_ENABLED=0).
go_build() {
  local dir="$1" out="$2" pkg="$3" gobin
  shift 3
  gobin="$(find_go)" || die "$NO_GO"
  (cd "$dir" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" \
    GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}" \
    "$gobin" build -trimpath -o "$out" "$@" "$pkg")
}

# go_module_dir GOMOD_DIR MODULE: MODULE's source in the Go module cache, as GOMOD_DIR pins it
# (downloaded if missing).
# addon_bin NAME GOMOD VERSION: where an opt-in component built from its own wrapper module
# (kueue.sh, training-operator.sh) is cached, keyed by that module's go.mod and go.sum.
addon_bin() {
  local h
  h="$(cat "$2/go.mod" "$2/go.sum" | sha256sum | cut -c1-12)"
  echo "$KERASJOB_CACHE/bin/$1-$3-$h/$1"
}

# addon_build NAME GOMOD BIN PACKAGE [go build flags...]: build PACKAGE of the wrapper module
# GOMOD into BIN, once (under a lock: two scripts may ask at the same time).
addon_build() {
  local name="$1" gomod="$2" bin="$3" pkg="$4" t0=$SECONDS tmp
  shift 4
  [ -x "$bin" ] && return 0
  mkdir -p "$KERASJOB_CACHE/bin"
  exec 7>"$KERASJOB_CACHE/bin/.build-$name.lock"
  flock -w 3600 7 || die "timed out waiting for $KERASJOB_CACHE/bin/.build-$name.lock"
  [ -x "$bin" ] && return 0
  log "building $name into $(dirname "$bin") (cold: a few minutes on 2 cores)"
  tmp="$(dirname "$bin")/.tmp"
  mkdir -p "$tmp"
  go_build "$gomod" "$tmp/$name" "$pkg" "$@" \
    || { rm -rf "$tmp"; die "go build of $name failed (see above)"; }
  mv -f "$tmp/$name" "$bin"; rmdir "$tmp"
  log "built $name in $((SECONDS - t0)) s"
}

# webhook_certs DIR NAME DNS: a self-signed CA (NAME-ca) and a serving certificate for DNS
# and 127.0.0.1 in DIR (ca.key, ca.crt, tls.key, tls.crt), RSA/PKCS#1 as cert-controller
# writes them, so that an addon's own certificate rotator (kueue.sh, training-operator.sh)
# finds them valid and keeps them.
webhook_certs() {
  local d="$1" name="$2" dns="$3"
  rm -rf "$d"
  mkdir -p "$d"
  (
    cd "$d"
    openssl genrsa -traditional -out ca.key 2048 2>/dev/null
    openssl req -x509 -new -key ca.key -sha256 -days 3650 -subj "/O=$name/CN=$name-ca" \
      -addext "subjectAltName=DNS:$name-ca" -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign" -out ca.crt 2>/dev/null
    openssl genrsa -traditional -out tls.key 2048 2>/dev/null
    openssl req -new -key tls.key -subj "/O=$name/CN=$dns" -out tls.csr 2>/dev/null
    printf 'subjectAltName=DNS:%s,IP:127.0.0.1\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n' \
      "$dns" > ext.cnf
    openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -sha256 \
      -extfile ext.cnf -out tls.crt 2>/dev/null
  ) || die "webhook certificate generation failed"
}

go_module_dir() {
  local gobin
  gobin="$(find_go)" || die "$NO_GO"
  (cd "$1" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly "$gobin" mod download -json "$2") \
    | awk -F'"' '$2 == "Dir" {print $4}'
}

# remove_chains PREFIX: every iptables/ip6tables chain named PREFIX* in every table -- the jumps
# into them from the built-in chains first, then their rules, then the chains.
remove_chains() {
  local ipt table chain rule rules
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    for table in filter nat mangle raw; do
      rules="$("$ipt-save" -t "$table" 2>/dev/null)" || continue
      while read -r rule; do
        [ -n "$rule" ] && eval "$ipt -w -t $table ${rule/#-A /-D }" 2>/dev/null || true
      done < <(grep -E "^-A (INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) .*-j $1" <<<"$rules" || true)
      for chain in $(grep -oE "^:$1[^ ]+" <<<"$rules" | tr -d ':'); do
        "$ipt" -w -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in $(grep -oE "^:$1[^ ]+" <<<"$rules" | tr -d ':'); do
        "$ipt" -w -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

# Only those in this network namespace count: a kind node's kubelet and kube-proxy (hack/kind)
# run in their container's, with iptables rules of their own.
other_node() {  # a kubelet or kube-proxy of another state directory (any other real node)
  local d args=() netns
  netns="$(readlink /proc/self/ns/net)"
  for d in /proc/[0-9]*; do
    mapfile -d '' args 2>/dev/null < "$d/cmdline" || continue
    [ ${#args[@]} -gt 0 ] || continue
    case "${args[0]##*/}" in kubelet|kube-proxy) ;; *) continue ;; esac
    [ "$(readlink "$d/ns/net" 2>/dev/null)" = "$netns" ] || continue
    [[ "${args[*]}" == *"$NODE_DIR/"* ]] || { echo "pid ${d#/proc/}: ${args[*]:0:3}"; return 0; }
  done
  return 0
}
