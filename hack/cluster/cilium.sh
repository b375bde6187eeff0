#!/usr/bin/env bash
# Cilium, the NetworkPolicy enforcer of the real node (issue 15): its agent and CNI plugin built
# from the Go module pinned in hack/cluster/cilium/gomod, run behind the node's bridge plugin.
#
#   hack/cluster/cilium.sh build     build (or confirm) the cached binaries
#   hack/cluster/cilium.sh --bin     print the directory that holds them
#   hack/cluster/cilium.sh up        start the agent on the running real node and chain its CNI
#                                    plugin after the bridge (Pods made from then on are its
#                                    endpoints); waits until the agent is healthy
#   hack/cluster/cilium.sh down      stop it and remove what it put on the machine: its devices,
#                                    tc programs, iptables chains, the chained plugin, its files
#   hack/cluster/cilium.sh leftovers print what of it is still here (exit 1 if any)
#
# How it runs: generic-veth chaining (the bridge plugin and host-local keep wiring and
# addressing Pods; cilium-cni finds the Pod's host veth and asks the agent to attach its
# endpoint programs there), native routing, no masquerading, kube-proxy kept, IPAM delegated
# to the bridge plugin. The agent compiles its datapath at run time with clang (Debian's
# clang-19). It runs in a mount namespace of its own in which two global kernel settings it
# would write are scratch files: kernel.unprivileged_bpf_disabled (1 locks it until reboot)
# and kernel.timer_migration; its bpffs and cgroup2 mounts stay in that namespace too. It does
# change the host network namespace (that is where the Pods' veths are): its cilium_host/
# cilium_net devices, CILIUM_* iptables chains and net.ipv4.fib_multipath_use_neigh, which down
# removes and restores. Why Cilium and not Calico: hack/cluster/cilium/README.md.
#
# Upstream builds both with CGO_ENABLED=0 (Makefile.defs), as here. Cold build: about 7 min
# on 2 shared cores.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CILIUM_GOMOD="$CLUSTER_DIR/cilium/gomod"
CILIUM_VERSION="$(awk '$1 == "require" && $2 == "github.com/cilium/cilium" {print $3}' "$CILIUM_GOMOD/go.mod")"

cilium_bin_dir() {
  local h
  h="$(cat "$CILIUM_GOMOD/go.mod" "$CILIUM_GOMOD/go.sum" | sha256sum | cut -c1-12)"
  echo "$KERASJOB_CACHE/bin/cilium-$CILIUM_VERSION-$h"
}
CILIUM_BIN_DIR="$(cilium_bin_dir)"

built() { [ -x "$CILIUM_BIN_DIR/cilium-agent" ] && [ -x "$CILIUM_BIN_DIR/cilium-cni" ]; }

build() {
  built && return 0
  mkdir -p "$KERASJOB_CACHE/bin"
  exec 7>"$KERASJOB_CACHE/bin/.build-cilium.lock"
  flock -w 3600 7 || die "timed out waiting for $KERASJOB_CACHE/bin/.build-cilium.lock"
  built && return 0
  log "building Cilium $CILIUM_VERSION into $CILIUM_BIN_DIR (cold: about 7 min on 2 cores)"
  local t0=$SECONDS tmp="$CILIUM_BIN_DIR/.tmp"
  mkdir -p "$tmp"
  # The agent's main package is github.com/cilium/cilium/daemon; upstream names it cilium-agent.
  local pkg out
  for pkg in daemon:cilium-agent plugins/cilium-cni:cilium-cni; do
    out="${pkg#*:}"
    go_build "$CILIUM_GOMOD" "$tmp/$out" "github.com/cilium/cilium/${pkg%%:*}" -tags osusergo \
      -ldflags "-s -w -X github.com/cilium/cilium/pkg/version.ciliumVersion=${CILIUM_VERSION#v}" \
      || { rm -rf "$tmp"; die "go build of Cilium $CILIUM_VERSION ($out) failed (see above)"; }
  done
  mv -f "$tmp/cilium-agent" "$tmp/cilium-cni" "$CILIUM_BIN_DIR/"; rmdir "$tmp"
  log "built Cilium in $((SECONDS - t0)) s"
}

# --- up / down ------------------------------------------------------------------------------
CIL_DIR="$NODE_DIR/cilium"
CIL_RUN=/var/run/cilium       # cilium-cni (run by containerd) finds the agent's socket here
CIL_SOCK="$CIL_RUN/cilium.sock"
CILIUM_HEALTH_PORT="${CILIUM_HEALTH_PORT:-20293}"  # 20290-20291: Kueue's
CILIUM_ROUTER_IP="${CILIUM_ROUTER_IP:-169.254.213.1}"  # cilium_host's address (delegated IPAM)
CONFLIST="$NODE_DIR/cni/net.d/10-kerasjob.conflist"
KCTL() { "$(bin_dir)/kubectl" --kubeconfig "$STATE_DIR/kubeconfig" "$@"; }

module_dir() { go_module_dir "$CILIUM_GOMOD" github.com/cilium/cilium; }  # bpf/, CRDs
clang_bin() {
  local c
  for c in clang-19 clang-20 clang-21; do command -v "$c" >/dev/null && { command -v "$c"; return 0; }; done
  die "Cilium compiles its datapath with clang >= 19: apt-get install --no-install-recommends clang-19"
}
healthy() { curl -fsS --max-time 2 --unix-socket "$CIL_SOCK" http://localhost/v1/healthz >/dev/null 2>&1; }

# The node's conflist with (chain on) or without (off) cilium-cni after the bridge plugin.
chain() {
  [ -f "$CONFLIST" ] || die "no $CONFLIST: is the real node running (make cluster-up)?"
  python3 - "$CONFLIST" "$1" <<'PY'
import json, os, sys
path, mode = sys.argv[1], sys.argv[2]
conf = json.load(open(path))
plugins = [p for p in conf["plugins"] if p.get("type") != "cilium-cni"]
if mode == "on":
    at = next(i for i, p in enumerate(plugins) if p.get("type") == "bridge") + 1
    plugins.insert(at, {"type": "cilium-cni", "chaining-mode": "generic-veth"})
conf["plugins"] = plugins
tmp = path + ".tmp"
with open(tmp, "w") as f:
    json.dump(conf, f, indent=2)
os.replace(tmp, path)
PY
}

up() {
  [ "$(id -u)" = 0 ] || die "Cilium's agent needs root"
  [ -S "$NODE_DIR/run/containerd.sock" ] || die "the real node is not running: make cluster-up first"
  build
  mkdir -p "$LOGS" "$PIDS" "$CIL_DIR"/{state,lib,path,masked} "$NODE_DIR/cni/bin" "$CIL_RUN"
  if alive cilium && healthy; then log "Cilium already running (pid $(cat "$PIDS/cilium.pid"))"; return 0; fi
  local src t0=$SECONDS
  src="$(module_dir)" || die "the Cilium module is not in the Go module cache: run cilium.sh build"
  # Its CRDs (the operator would register them; no operator runs: identities are CRD-backed).
  local crds=(-f "$src/pkg/k8s/apis/cilium.io/client/crds/v2/" -f "$src/pkg/k8s/apis/cilium.io/client/crds/v2alpha1/")
  KCTL apply --server-side --force-conflicts "${crds[@]}" >/dev/null
  KCTL wait --for=condition=Established --timeout=60s "${crds[@]}" >/dev/null
  ln -sfn "$src/bpf" "$CIL_DIR/lib/bpf"
  ln -sfn "$(clang_bin)" "$CIL_DIR/path/clang"
  ln -sfn "$CILIUM_BIN_DIR/cilium-cni" "$NODE_DIR/cni/bin/cilium-cni"
  # The kernel.* settings it would change for the whole machine: scratch files in its namespace.
  local s
  for s in kernel/unprivileged_bpf_disabled kernel/timer_migration; do
    cat "/proc/sys/$s" > "$CIL_DIR/masked/${s//\//.}"
  done
  [ -f "$CIL_DIR/sysctls" ] || for s in net/ipv4/fib_multipath_use_neigh net/ipv4/conf/all/rp_filter net/core/bpf_jit_enable; do
    echo "$s $(cat "/proc/sys/$s")"; done > "$CIL_DIR/sysctls"
  launch cilium env K8S_NODE_NAME="$NODE_NAME" PATH="$CIL_DIR/path:$PATH" \
    unshare --mount --propagation private -- sh -c '
      set -e
      mount --bind "$1/kernel.unprivileged_bpf_disabled" /proc/sys/kernel/unprivileged_bpf_disabled
      mount --bind "$1/kernel.timer_migration" /proc/sys/kernel/timer_migration
      shift; exec "$@"' sh "$CIL_DIR/masked" \
    "$CILIUM_BIN_DIR/cilium-agent" \
      --k8s-kubeconfig-path="$STATE_DIR/kubeconfig" \
      --cni-chaining-mode=generic-veth \
      --ipam=delegated-plugin --local-router-ipv4="$CILIUM_ROUTER_IP" \
      --routing-mode=native --ipv4-native-routing-cidr="$NODE_POD_CIDR" \
      --enable-ipv4-masquerade=false --enable-ipv6-masquerade=false --enable-ipv6=false \
      --kube-proxy-replacement=false --enable-l7-proxy=false --enable-hubble=false \
      --enable-health-checking=false --enable-endpoint-health-checking=false \
      --identity-allocation-mode=crd --enable-gops=false --prometheus-serve-addr= \
      --agent-health-port="$CILIUM_HEALTH_PORT" \
      --devices=kj-none0 \
      --state-dir="$CIL_DIR/state" --lib-dir="$CIL_DIR/lib" --socket-path="$CIL_SOCK" \
      --bpf-root=/sys/fs/bpf \
      --write-cni-conf-when-ready= --cni-exclusive=false
  local deadline=$((SECONDS + ${CILIUM_READY_TIMEOUT:-300}))
  until healthy; do
    alive cilium || { tail -40 "$LOGS/cilium.log" >&2; die "the Cilium agent exited (log: $LOGS/cilium.log)"; }
    [ "$SECONDS" -lt "$deadline" ] || { tail -40 "$LOGS/cilium.log" >&2; die "Cilium not healthy in ${CILIUM_READY_TIMEOUT:-300} s"; }
    sleep 1
  done
  chain on
  log "Cilium $CILIUM_VERSION healthy in $((SECONDS - t0)) s, chained after the bridge (log: $LOGS/cilium.log)"
}

down() {
  # New Pods are the bridge's alone from here. cilium-cni itself stays in the node's CNI bin
  # dir (node.sh down removes it): the Pods it wired still call it when they are deleted, and
  # with no agent it queues their endpoint's deletion (in $CIL_RUN/deleteQueue) and succeeds.
  if [ -f "$CONFLIST" ]; then chain off; fi
  stop_proc cilium 10
  # Its devices, and its tc programs on the Pods' veths (those outlive the agent).
  local dev
  for dev in cilium_host cilium_net cilium_vxlan cilium_geneve; do ip link del "$dev" 2>/dev/null || true; done
  for dev in $(ip -o link show master "$NODE_BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    tc filter del dev "$dev" ingress 2>/dev/null || true
    tc filter del dev "$dev" egress 2>/dev/null || true
    tc qdisc del dev "$dev" clsact 2>/dev/null || true
  done
  remove_chains CILIUM_
  if [ -f "$CIL_DIR/sysctls" ]; then
    local s v
    while read -r s v; do echo "$v" > "/proc/sys/$s" 2>/dev/null || true; done < "$CIL_DIR/sysctls"
  fi
  rm -rf "$CIL_DIR" "$CIL_RUN"
}

leftovers() {
  local found=() m
  pgrep -f "$CILIUM_BIN_DIR/cilium-agent" >/dev/null && found+=("process cilium-agent")
  for m in cilium_host cilium_net; do ip link show "$m" >/dev/null 2>&1 && found+=("device $m"); done
  while read -r m; do [ -n "$m" ] && found+=("iptables: $m"); done \
    < <({ iptables-save; ip6tables-save; } 2>/dev/null | grep -E '^(-A|:)CILIUM_|-j CILIUM_' || true)
  [ ! -e "$CIL_RUN" ] || found+=("directory $CIL_RUN")
  [ ! -e "$CIL_DIR" ] || found+=("directory $CIL_DIR")
  [ ${#found[@]} -eq 0 ] && return 0
  printf '%s\n' "${found[@]}"
  return 1
}

case "${1:-}" in
  build) build; log "Cilium $CILIUM_VERSION: $CILIUM_BIN_DIR" ;;
  --bin) echo "$CILIUM_BIN_DIR" ;;
  up) up ;;
  down) down ;;
  leftovers) leftovers ;;
  *) die "usage: cilium.sh build | --bin | up | down | leftovers" ;;
esac
