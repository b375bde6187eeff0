#!/usr/bin/env bash
# A real DRA driver on the real node (issue 24): Kubernetes' own DRA test driver
# (k8s.io/kubernetes/test/e2e/dra/test-driver, built from the wrapper module
# hack/cluster/dra/gomod at the same Kubernetes release as the cluster) runs as the node's
# kubelet plugin and publishes fake devices in a ResourceSlice; a DeviceClass selects them.
#
#   hack/cluster/dra.sh build       build (or confirm) the cached binary
#   hack/cluster/dra.sh --bin       print the binary's path
#   hack/cluster/dra.sh up          build if needed, start the kubelet plugin on the running real
#                                   node, create the DeviceClass, wait for its ResourceSlice;
#                                   idempotent
#   hack/cluster/dra.sh down [--now] stop it (first waiting up to DRA_DRAIN_TIMEOUT s until no Pod
#                                   holds one of its claims: the kubelet needs the driver to
#                                   let such a Pod terminate; --now: no wait), delete its
#                                   ResourceSlices, DeviceClass and CDI specs
#
# How it runs: a host process (like the kubelet) with the cluster's admin kubeconfig. It
# registers with the kubelet through the kubelet's plugin registration directory
# ($NODE_DIR/kubelet/plugins_registry; the kubelet runs with --root-dir=$NODE_DIR/kubelet), serves
# the DRA gRPC API on a socket in $NODE_DIR/kubelet/plugins/<driver>/, and publishes
# DRA_DEVICES devices (device-00, device-01, ...) in one pool named after the node. The
# scheduler allocates them (structured parameters: no controller of the driver's own); on
# NodePrepareResources the driver writes a CDI spec per claim into $NODE_DIR/cdi, which the
# node's containerd reads (node.sh: enable_cdi, cdi_spec_dirs), and the container gets the
# spec's environment: `claim_<claim name>_<request name>=true` (non-alphanumerics as `_`)
# plus `user_<key>=<value>` for each key of an opaque config of the claim (`admin_` from the
# DeviceClass). That variable is how a test sees that a claim's device reached a container.
#
# Env: DRA_DRIVER (fake-gpu.kerasjob.dev), DRA_CLASS (fake-gpu.kerasjob.dev: the DeviceClass),
# DRA_DEVICES (4), DRA_READY_TIMEOUT (60 s), DRA_DRAIN_TIMEOUT (90 s); the cluster's variables (lib.sh) as for up.sh.
# Opt-in: tests/e2e/test_dra.py brings it up for its module; node.sh down stops it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DRA_GOMOD="$CLUSTER_DIR/dra/gomod"
DRA_VERSION="$(pinned_version ../dra/gomod k8s.io/kubernetes)"
DRA_DRIVER="${DRA_DRIVER:-fake-gpu.kerasjob.dev}"
DRA_CLASS="${DRA_CLASS:-fake-gpu.kerasjob.dev}"
DRA_DEVICES="${DRA_DEVICES:-4}"
DRA_READY_TIMEOUT="${DRA_READY_TIMEOUT:-60}"
DRA_DRAIN_TIMEOUT="${DRA_DRAIN_TIMEOUT:-90}"
KUBELET_ROOT="$NODE_DIR/kubelet"
CDI_DIR="$NODE_DIR/cdi"
KUBECONFIG_FILE="$STATE_DIR/kubeconfig"

BIN_DRA="$(addon_bin dra-test-driver "$DRA_GOMOD" "$DRA_VERSION")"

build() {
  addon_build dra-test-driver "$DRA_GOMOD" "$BIN_DRA" k8s.io/kubernetes/test/e2e/dra/test-driver \
    -ldflags "-s -w"
}

kctl() { "$(bin_dir)/kubectl" --kubeconfig "$KUBECONFIG_FILE" --request-timeout=10s "$@"; }

slices() {  # the number of devices the driver publishes for the node
  kctl get resourceslices --field-selector "spec.driver=$DRA_DRIVER,spec.nodeName=$NODE_NAME" \
    -o jsonpath='{range .items[*]}{range .spec.devices[*]}{.name}{"\n"}{end}{end}' 2>/dev/null | grep -c . || true
}

up() {
  [ "$(id -u)" = 0 ] || die "the DRA kubelet plugin needs root (the kubelet's plugin directories)"
  command -v jq >/dev/null || die "jq not found: apt-get install jq"
  [ -f "$KUBECONFIG_FILE" ] || die "no cluster at $STATE_DIR: start it first (hack/cluster/up.sh)"
  alive kubelet || die "the real node is not running: make cluster-up first (not KERASJOB_NODE=0)"
  grep -q 'enable_cdi = true' "$NODE_DIR/containerd.toml" 2>/dev/null \
    || die "the node's containerd was started without CDI ($NODE_DIR/containerd.toml): restart the cluster with this checkout's node.sh"
  build
  local settings="driver=$DRA_DRIVER class=$DRA_CLASS devices=$DRA_DEVICES"
  if alive dra && [ "$(cat "$NODE_DIR/dra.settings" 2>/dev/null)" = "$settings" ] \
     && [ "$(slices)" = "$DRA_DEVICES" ]; then
    log "DRA driver already running (pid $(cat "$PIDS/dra.pid"))"; return 0
  fi
  alive dra && down
  local t0; t0="$(date +%s.%N)"
  mkdir -p "$CDI_DIR" "$KUBELET_ROOT/plugins_registry" "$KUBELET_ROOT/plugins/$DRA_DRIVER" "$LOGS" "$PIDS"
  launch dra "$BIN_DRA" --kubeconfig="$KUBECONFIG_FILE" --drivername="$DRA_DRIVER" -v=2 \
    kubelet-plugin --node-name="$NODE_NAME" --num-devices="$DRA_DEVICES" \
    --plugin-registration-path="$KUBELET_ROOT/plugins_registry" \
    --datadir="$KUBELET_ROOT/plugins" --cdi-dir="$CDI_DIR"
  echo "$settings" > "$NODE_DIR/dra.settings"
  kctl apply -f - >/dev/null <<EOF
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: $DRA_CLASS
  labels: {kerasjob.dev/dra: fake}
spec:
  selectors:
  - cel:
      expression: device.driver == "$DRA_DRIVER"
EOF
  # Ready: its ResourceSlice lists every device, and the kubelet has registered the plugin.
  local i
  for ((i = 0; i < DRA_READY_TIMEOUT * 4; i++)); do
    alive dra || { tail -30 "$LOGS/dra.log" >&2; die "the DRA driver exited (log: $LOGS/dra.log)"; }
    if [ "$(slices)" = "$DRA_DEVICES" ] && registered; then break; fi
    sleep 0.25
  done
  ((i < DRA_READY_TIMEOUT * 4)) || { tail -30 "$LOGS/dra.log" >&2; die "DRA driver not ready in ${DRA_READY_TIMEOUT}s (log: $LOGS/dra.log)"; }
  log "DRA driver $DRA_DRIVER ($DRA_VERSION test driver) ready in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s: $DRA_DEVICES fake devices on $NODE_NAME, DeviceClass $DRA_CLASS (log: $LOGS/dra.log)"
}

# The plugin's registration socket is where the kubelet's plugin watcher looks (it picks it
# up within a second; a Pod that comes earlier waits for it in ContainerCreating).
registered() { [ -S "$KUBELET_ROOT/plugins_registry/$DRA_DRIVER-reg.sock" ]; }

strays() {  # driver processes of this node whose pid file is gone
  local d args=()
  for d in /proc/[0-9]*; do
    mapfile -d '' args 2>/dev/null < "$d/cmdline" || continue
    [ ${#args[@]} -gt 0 ] && [ "${args[0]}" = "$BIN_DRA" ] && [[ "${args[*]}" == *"$NODE_DIR/"* ]] \
      && echo "${d#/proc/}"
  done
  return 0
}

# in_use: claims of the driver that a Pod still holds (reserved). The kubelet needs the driver
# to unprepare them before such a Pod can terminate: stopping it first leaves the Pod
# Terminating ("DRA driver ... is not registered") until the driver is back.
in_use() {
  kctl get resourceclaims -A -o json 2>/dev/null | jq -r --arg d "$DRA_DRIVER" '.items[]
    | select(any(.status.allocation.devices.results[]?; .driver == $d))
    | select((.status.reservedFor // []) | length > 0)
    | "\(.metadata.namespace)/\(.metadata.name)"' 2>/dev/null || true
}

down() {  # down [--now]: --now (node.sh down: the node goes too) does not wait for the Pods
  if [ "${1:-}" != --now ] && alive dra && [ -f "$KUBECONFIG_FILE" ]; then
    local i left
    for ((i = 0; i < DRA_DRAIN_TIMEOUT; i++)); do
      left="$(in_use)"; [ -n "$left" ] || break
      ((i % 10)) || log "waiting for Pods to release claims: $(echo $left)"
      sleep 1
    done
    [ -z "$left" ] || log "warning: stopping the driver while claims are still held (their Pods stay Terminating until it is back): $(echo $left)"
  fi
  stop_proc dra 10
  local left; left="$(strays)"
  # shellcheck disable=SC2086
  [ -z "$left" ] || kill -KILL $left 2>/dev/null || true
  if [ -f "$KUBECONFIG_FILE" ]; then
    # The kubelet removes a gone driver's slices only after a grace period: at once here.
    kctl delete resourceslices --field-selector "spec.driver=$DRA_DRIVER" --ignore-not-found >/dev/null 2>&1 || true
    kctl delete deviceclass "$DRA_CLASS" --ignore-not-found >/dev/null 2>&1 || true
  fi
  rm -rf "$CDI_DIR" "$KUBELET_ROOT/plugins/$DRA_DRIVER" "$NODE_DIR/dra.settings" "$PIDS/dra.cmd"
  rm -f "$KUBELET_ROOT/plugins_registry/$DRA_DRIVER"-reg.sock
}

case "${1:-}" in
  build) build; log "DRA test driver ($DRA_VERSION): $BIN_DRA" ;;
  --bin) echo "$BIN_DRA" ;;
  up) up ;;
  down) down "${2:-}" ;;
  *) die "usage: dra.sh build | --bin | up | down [--now]" ;;
esac
