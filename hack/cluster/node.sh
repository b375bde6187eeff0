#!/usr/bin/env bash
# The real node of the local cluster: containerd + runc + the CNI bridge, a kubelet and
# kube-proxy built from the pinned Kubernetes modules, and CoreDNS built from its Go module.
# up.sh and down.sh call it; by hand:
#
#   hack/cluster/node.sh check        exit 1 with one line naming what is missing (root, a package)
#   hack/cluster/node.sh network      create the node's bridge (before the API server binds to it)
#   hack/cluster/node.sh start        start containerd, kubelet, kube-proxy, CoreDNS; wait for Ready
#   hack/cluster/node.sh load TAR...  import image archives (`docker save` output) into containerd
#   hack/cluster/node.sh kill ID [SIG] signal a container's main process (tests: a crashed worker)
#   hack/cluster/node.sh down         stop it all and remove every process, mount, netns, cgroup,
#                                     iptables rule and file it made, but the bridge
#   hack/cluster/node.sh leftovers [--network]  list what of the node is still here (exit 1 if any)
#   hack/cluster/node.sh network-down remove the bridge, its iptables rules, restore the sysctls
#                                     (after the API server stopped: it listens on the bridge)
#
# Layout: one bridge $NODE_BRIDGE (address $NODE_IP = the Node's InternalIP, also where the API
# server listens, so Pods reach it through the `kubernetes` Service), Pods in $NODE_POD_CIDR,
# Services in 10.96.0.0/16 (kube-proxy, iptables mode), cluster DNS at 10.96.0.10 (CoreDNS on
# $NODE_IP:$COREDNS_PORT behind the kube-dns Service). Every file lives in $NODE_DIR; cgroups
# under /<controller>/$NODE_CGROUP. No Pod traffic leaves the machine: no NAT, no default route
# to the outside for Pods.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BIN="$(bin_dir)"
SOCK="$NODE_DIR/run/containerd.sock"
# (ctr warns about cgroup v1 on every call: filtered.)
CTR() { "$BIN/ctr" --address "$SOCK" --namespace k8s.io "$@" 2> >(grep -v "support for cgroup v1 is deprecated" >&2); }
KCTL() { "$BIN/kubectl" --kubeconfig "$STATE_DIR/kubeconfig" "$@"; }
# Marks our iptables rules so that down removes exactly these.
RULE_TAG="kerasjob-node:$NODE_BRIDGE"
# Kernel settings the kubelet and the CNI bridge change; down restores them.
SYSCTLS=(net/ipv4/ip_forward vm/overcommit_memory kernel/panic kernel/panic_on_oops)


# --- check --------------------------------------------------------------------------------
check() {
  local missing=() t
  [ "$(id -u)" = 0 ] || die "the real node needs root (containers, network namespaces, cgroups); run as root, or KERASJOB_NODE=0 for a control plane with KWOK nodes only"
  for t in ip iptables runc mount umount findmnt python3; do
    command -v "$t" >/dev/null || missing+=("$t")
  done
  [ -x "$CNI_BIN_DIR/bridge" ] && [ -x "$CNI_BIN_DIR/host-local" ] && [ -x "$CNI_BIN_DIR/loopback" ] \
    || missing+=("CNI plugins in $CNI_BIN_DIR")
  command -v conntrack >/dev/null || missing+=(conntrack)
  if [ ${#missing[@]} -gt 0 ]; then
    die "the real node needs: ${missing[*]} (apt-get install iproute2 iptables runc conntrack containernetworking-plugins util-linux), or KERASJOB_NODE=0"
  fi
  [ -d /sys/fs/cgroup/memory ] || [ -f /sys/fs/cgroup/cgroup.controllers ] \
    || die "no cgroup filesystem at /sys/fs/cgroup: the real node cannot limit Pods (KERASJOB_NODE=0 skips it)"
  local other
  other="$(other_node)"
  [ -z "$other" ] || die "another real node runs on this machine ($other); kube-proxy's iptables rules are per machine, so only one can: stop it (make cluster-down in its checkout), or KERASJOB_NODE=0"
  [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] \
    || die "bridge netfilter (br_netfilter) is not available: 'modprobe br_netfilter', or KERASJOB_NODE=0"
}


# --- network: the bridge must exist before the API server binds to its address -------------
network() {
  check
  local overlaps
  overlaps="$(ip -o route show to match "$NODE_IP" 2>/dev/null | grep -v '^default' || true)"
  if [[ "$(ip route get "$NODE_IP" 2>/dev/null || true)" == *"dev $NODE_BRIDGE"* ]]; then :; elif
    [ -n "$overlaps" ]; then
    die "$NODE_POD_CIDR overlaps a network of this machine (${overlaps%%$'\n'*}); pick another with NODE_POD_CIDR/NODE_IP"
  fi
  mkdir -p "$NODE_DIR"
  local s
  if [ ! -f "$NODE_DIR/sysctls" ]; then
    for s in "${SYSCTLS[@]}"; do echo "$s $(cat "/proc/sys/$s")"; done > "$NODE_DIR/sysctls"
  fi
  if ! ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
    ip link add "$NODE_BRIDGE" type bridge
  fi
  # A MAC set by hand stays (lib.sh NODE_BRIDGE_MAC says why).
  ip link set "$NODE_BRIDGE" address "$NODE_BRIDGE_MAC"
  ip addr replace "$NODE_IP/${NODE_POD_CIDR#*/}" dev "$NODE_BRIDGE"
  ip link set "$NODE_BRIDGE" up
  echo 1 > /proc/sys/net/ipv4/ip_forward
  # Pod traffic crosses the FORWARD chain (bridge netfilter). Docker sets its policy to DROP;
  # accept what enters or leaves our bridge, first in the chain.
  local dir
  for dir in -i -o; do
    iptables -w -C FORWARD "$dir" "$NODE_BRIDGE" -m comment --comment "$RULE_TAG" -j ACCEPT 2>/dev/null \
      || iptables -w -I FORWARD 1 "$dir" "$NODE_BRIDGE" -m comment --comment "$RULE_TAG" -j ACCEPT
  done
}

# --- certificates and configuration --------------------------------------------------------
sign() {  # sign NAME SUBJECT EXT: a key + certificate signed by the cluster CA, in $NODE_DIR/pki
  local d="$NODE_DIR/pki"
  openssl ecparam -name prime256v1 -genkey -noout -out "$d/$1.key" 2>/dev/null
  openssl req -new -key "$d/$1.key" -subj "$2" -out "$d/$1.csr" 2>/dev/null
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" "$3" > "$d/$1.ext"
  openssl x509 -req -in "$d/$1.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$d/$1.ext" -out "$d/$1.crt" 2>/dev/null
  rm -f "$d/$1.csr" "$d/$1.ext"
}
kubeconfig() {  # kubeconfig NAME: a kubeconfig for the client certificate NAME
  cat > "$NODE_DIR/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "$API_SERVER_URL", certificate-authority: "$PKI/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$NODE_DIR/pki/$1.crt", client-key: "$NODE_DIR/pki/$1.key"}
contexts:
- name: local
  context: {cluster: local, user: $1}
current-context: local
EOF
}

configure() {
  mkdir -p "$NODE_DIR"/{pki,run,containerd/root,containerd/state,cni/net.d,cni/bin,kubelet,pod-logs,volume-plugins}
  chmod 700 "$NODE_DIR/pki"
  sign kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "extendedKeyUsage=clientAuth"
  sign kubelet-serving "/O=system:nodes/CN=system:node:$NODE_NAME" \
    "$(printf '%s\n' "extendedKeyUsage=serverAuth" "subjectAltName=IP:$NODE_IP,DNS:$NODE_NAME")"
  sign kube-proxy "/CN=system:kube-proxy" "extendedKeyUsage=clientAuth"
  sign coredns "/CN=kerasjob:coredns" "extendedKeyUsage=clientAuth"
  kubeconfig kubelet; kubeconfig kube-proxy; kubeconfig coredns

  cat > "$NODE_DIR/containerd.toml" <<EOF
version = 3
root = "$NODE_DIR/containerd/root"
state = "$NODE_DIR/containerd/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[debug]
  level = "warn"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$PAUSE_IMAGE"
[plugins."io.containerd.cri.v1.runtime"]
  # These VMs withhold CAP_SYS_RESOURCE: without it runc fails to lower oom_score_adj.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_unprivileged_ports = false
  # CDI (containerd 2.x's default, said here): a DRA driver's per-claim device specs reach
  # the containers. hack/cluster/dra.sh's driver writes them to $NODE_DIR/cdi.
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi", "$NODE_DIR/cdi"]
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$CNI_BIN_DIR", "$NODE_DIR/cni/bin"]
    conf_dir = "$NODE_DIR/cni/net.d"
[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
EOF

  # Our neighbour reset, chained after the bridge (hack/cluster/cni/neigh-reset.py says why).
  { echo "#!$(command -v python3) -I"; cat "$CLUSTER_DIR/cni/neigh-reset.py"; } \
    > "$NODE_DIR/cni/bin/kerasjob-neigh-reset"
  chmod 755 "$NODE_DIR/cni/bin/kerasjob-neigh-reset"

  # No ipMasq: Pod traffic stays on this machine, and the bridge plugin then adds no iptables
  # rules of its own (nothing to clean up after a Pod that was never torn down).
  cat > "$NODE_DIR/cni/net.d/10-kerasjob.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "kerasjob",
  "plugins": [
    {"type": "bridge", "bridge": "$NODE_BRIDGE", "isGateway": true, "ipMasq": false,
     "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$NODE_DIR/cni/ipam",
              "ranges": [[{"subnet": "$NODE_POD_CIDR", "gateway": "$NODE_IP"}]],
              "routes": [{"dst": "$SERVICE_CIDR"}, {"dst": "$NODE_POD_CIDR"}]}},
    {"type": "kerasjob-neigh-reset"},
    {"type": "portmap", "capabilities": {"portMappings": true}, "snat": false}
  ]
}
EOF

  cat > "$NODE_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: "$NODE_IP"
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: "$NODE_DIR/pki/kubelet-serving.crt"
tlsPrivateKeyFile: "$NODE_DIR/pki/kubelet-serving.key"
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$PKI/ca.crt"}
authorization: {mode: Webhook}
containerRuntimeEndpoint: "unix://$SOCK"
cgroupDriver: cgroupfs
cgroupRoot: "/$NODE_CGROUP"
failCgroupV1: false
failSwapOn: false
clusterDNS: ["$DNS_IP"]
clusterDomain: cluster.local
resolvConf: ""
podLogsDir: "$NODE_DIR/pod-logs"
volumePluginDir: "$NODE_DIR/volume-plugins"
# Our images are imported, never pulled: never garbage-collect them, and do not evict Pods
# for a disk that other work on this machine fills.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
serializeImagePulls: false
nodeStatusUpdateFrequency: 4s
nodeStatusReportFrequency: 10s
syncFrequency: 10s
fileCheckFrequency: 0s
shutdownGracePeriod: 0s
maxPods: 64
EOF

  cat > "$NODE_DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$NODE_DIR/kube-proxy.kubeconfig"}
hostnameOverride: "$NODE_NAME"
bindAddress: "$NODE_IP"
healthzBindAddress: "127.0.0.1:$KUBE_PROXY_HEALTHZ_PORT"
metricsBindAddress: "127.0.0.1:$KUBE_PROXY_METRICS_PORT"
mode: iptables
clusterCIDR: "$NODE_POD_CIDR"
nodePortAddresses: ["$NODE_IP/32"]
iptables: {localhostNodePorts: false, masqueradeAll: false, syncPeriod: 30s, minSyncPeriod: 0s}
# Leave the machine's conntrack settings alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF

  node_corefile "$NODE_IP" "$COREDNS_PORT" "$COREDNS_HEALTH_PORT" "$COREDNS_READY_PORT" \
    "$NODE_DIR/coredns.kubeconfig" > "$NODE_DIR/Corefile"
}

# The cgroup root the kubelet puts Pods under must exist (with cpus/mems for cpuset).
make_cgroups() {
  local d
  for d in /sys/fs/cgroup/*/; do
    [ -d "$d" ] || continue
    mkdir -p "$d$NODE_CGROUP" 2>/dev/null || continue
    if [ -f "${d}cpuset.cpus" ]; then
      cat "${d}cpuset.cpus" > "$d$NODE_CGROUP/cpuset.cpus"
      cat "${d}cpuset.mems" > "$d$NODE_CGROUP/cpuset.mems"
    fi
  done
}

cluster_objects() {  # RBAC for CoreDNS and the kube-dns Service + its endpoints (CoreDNS runs on the host)
  KCTL apply -f - > /dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "kerasjob:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "kerasjob:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "kerasjob:coredns"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "kerasjob:coredns"}]
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS}
spec:
  clusterIP: $DNS_IP
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: $COREDNS_PORT}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: $COREDNS_PORT}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-host
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns, endpointslice.kubernetes.io/managed-by: kerasjob.dev-node}
addressType: IPv4
endpoints:
- addresses: ["$NODE_IP"]
  conditions: {ready: true}
  nodeName: "$NODE_NAME"
ports:
- {name: dns, port: $COREDNS_PORT, protocol: UDP}
- {name: dns-tcp, port: $COREDNS_PORT, protocol: TCP}
EOF
}

node_ready() {
  [ "$(KCTL get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

start() {
  check
  for b in kubelet kube-proxy containerd containerd-shim-runc-v2 ctr coredns; do
    [ -x "$BIN/$b" ] || die "missing $BIN/$b: run 'make binaries' (hack/cluster/build.sh) first"
  done
  ip link show "$NODE_BRIDGE" >/dev/null 2>&1 || network
  mkdir -p "$LOGS" "$PIDS"
  local t0=$SECONDS
  configure
  make_cgroups
  # Our shim before any other containerd's (e.g. Docker's) on PATH.
  launch containerd env PATH="$BIN:$PATH" "$BIN/containerd" --config "$NODE_DIR/containerd.toml"
  local deadline=$((SECONDS + 30))
  until CTR version >/dev/null 2>&1; do
    alive containerd || { tail -n 20 "$LOGS/containerd.log" >&2; die "containerd exited at start (log: $LOGS/containerd.log)"; }
    [ "$SECONDS" -lt "$deadline" ] || die "containerd did not answer on $SOCK within 30 s (log: $LOGS/containerd.log)"
    sleep 0.1
  done
  load_pause
  cluster_objects
  launch kubelet "$BIN/kubelet" --config="$NODE_DIR/kubelet.yaml" \
    --kubeconfig="$NODE_DIR/kubelet.kubeconfig" --root-dir="$NODE_DIR/kubelet" \
    --cert-dir="$NODE_DIR/pki" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" \
    --node-labels="kerasjob.dev/node=real" --v=1 ${KUBELET_EXTRA_ARGS:-}
  launch kube-proxy "$BIN/kube-proxy" --config="$NODE_DIR/kube-proxy.yaml" --v=1
  launch coredns "$BIN/coredns" -conf "$NODE_DIR/Corefile"
  deadline=$((SECONDS + ${NODE_READY_TIMEOUT:-60}))
  until node_ready; do
    local c
    for c in containerd kubelet kube-proxy coredns; do
      alive "$c" || { tail -n 20 "$LOGS/$c.log" >&2; die "$c exited while the node was starting (log: $LOGS/$c.log)"; }
    done
    [ "$SECONDS" -lt "$deadline" ] || die "node $NODE_NAME not Ready after ${NODE_READY_TIMEOUT:-60} s (logs: $LOGS/kubelet.log)"
    sleep 0.2
  done
  log "node $NODE_NAME Ready in $((SECONDS - t0)) s (containerd $CONTAINERD_VERSION, CoreDNS $COREDNS_VERSION, Pods on $NODE_BRIDGE $NODE_POD_CIDR)"
}

load_pause() {
  CTR images inspect "$PAUSE_IMAGE" >/dev/null 2>&1 && return 0
  # Keyed by the pause program's source: a change builds a new archive.
  local key tar
  key="$(cat "$REPO_ROOT"/hack/images/pause/*.go "$REPO_ROOT/hack/images/pause/go.mod" "$CLUSTER_DIR/pause-image.sh" | sha256sum | cut -c1-12)"
  tar="$KERASJOB_CACHE/images/pause-$key.oci.tar"
  [ -f "$tar" ] || "$CLUSTER_DIR/pause-image.sh" "$tar" || die "could not build the pause image ($PAUSE_IMAGE)"
  CTR images import "$tar" >/dev/null || die "could not import $tar into the node's containerd"
}

load() {  # load TAR...: import image archives into the node's containerd (k8s.io namespace)
  [ $# -gt 0 ] || die "usage: node.sh load IMAGE.tar..."
  [ -S "$SOCK" ] || die "the real node is not running (no $SOCK): make cluster-up first"
  local t id mark
  mkdir -p "$NODE_DIR/loaded"
  for t in "$@"; do
    [ -f "$t" ] || die "no image archive $t"
    # Skip an archive this node already imported (same content: same checksum or image id).
    if [ -f "$t.id" ]; then id="$(cat "$t.id")"; else id="$(stat -c '%s-%Y' "$t")"; fi
    mark="$NODE_DIR/loaded/$(basename "$t").id"
    [ "$(cat "$mark" 2>/dev/null)" = "$id" ] && continue
    local t0=$SECONDS
    CTR images import "$t" >/dev/null || die "could not import $t into the node's containerd"
    echo "$id" > "$mark"
    log "imported $(basename "$t") into the node in $((SECONDS - t0)) s"
  done
}

kill_container() {  # kill_container ID [SIGNAL]: signal a container's main process
  [ -n "${1:-}" ] || die "usage: node.sh kill CONTAINER_ID [SIGNAL]"
  CTR tasks kill --signal "${2:-SIGKILL}" "$1" || die "could not signal container $1"
}

tag_image() {  # tag_image SRC DST: another name for an imported image (an "upgrade" in tests)
  [ $# -eq 2 ] || die "usage: node.sh tag SRC_IMAGE DST_IMAGE"
  CTR images tag --force "$(normalise_ref "$1")" "$(normalise_ref "$2")" >/dev/null \
    || die "could not tag $1 as $2"
}

normalise_ref() {  # kerasjob/operator:dev -> docker.io/kerasjob/operator:dev (containerd's names)
  case "$1" in
    */*.*/*|*.*/*|localhost/*) echo "$1" ;;
    */*) echo "docker.io/$1" ;;
    *) echo "docker.io/library/$1" ;;
  esac
}

netcut() {  # netcut CONTAINER_ID on|off: drop (on) or restore (off) all traffic of the
  # container's network namespace but loopback, with iptables rules inside that namespace
  # (the link stays up, as in a network partition; nothing outside the Pod changes).
  [ $# -eq 2 ] || die "usage: node.sh netcut CONTAINER_ID on|off"
  local pid
  pid="$(CTR tasks ls | awk -v id="$1" '$1 == id { print $2 }')"
  [ -n "$pid" ] || die "container $1 has no running task"
  local chain iface mark=(-m comment --comment kerasjob-netcut -j DROP)
  for chain in INPUT OUTPUT; do
    iface=-i; [ "$chain" = OUTPUT ] && iface=-o
    case "$2" in
      on) nsenter -t "$pid" -n iptables -I "$chain" 1 ! "$iface" lo "${mark[@]}" ;;
      off) while nsenter -t "$pid" -n iptables -D "$chain" ! "$iface" lo "${mark[@]}" 2>/dev/null; do :; done ;;
      *) die "netcut: on or off, not $2" ;;
    esac
  done
}

# --- down -----------------------------------------------------------------------------------
pids_in_cgroups() {  # every process in a cgroup under our root
  local d
  for d in /sys/fs/cgroup/*/"$NODE_CGROUP"; do
    if [ -d "$d" ]; then find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null || true; fi
  done | sort -u
}

our_shims() {  # containerd-shim-runc-v2 processes of our containerd
  local d args=()
  for d in /proc/[0-9]*; do
    mapfile -d '' args 2>/dev/null < "$d/cmdline" || continue
    [ ${#args[@]} -gt 0 ] && [ "${args[0]##*/}" = containerd-shim-runc-v2 ] || continue
    [[ "${args[*]}" == *"$SOCK"* ]] && echo "${d#/proc/}"
  done
  return 0
}

down() {
  # 0. The NetworkPolicy enforcer, if one was started on this node (cilium.sh up).
  if [ -e "$NODE_DIR/cni/bin/cilium-cni" ]; then "$CLUSTER_DIR/cilium.sh" down; fi
  # The DRA driver (dra.sh up), a kubelet plugin of this node.
  if [ -f "$PIDS/dra.pid" ] || [ -d "$NODE_DIR/cdi" ]; then "$CLUSTER_DIR/dra.sh" down --now; fi
  # 1. Nothing may restart a container: the kubelet goes first.
  stop_proc kubelet
  stop_proc kube-proxy
  stop_proc coredns
  # 2. Every container process (all live in our cgroups), then the shims and containerd.
  local i left
  for ((i = 0; i < 50; i++)); do
    left="$(pids_in_cgroups)"; [ -n "$left" ] || break
    # shellcheck disable=SC2086
    kill -KILL $left 2>/dev/null || true
    sleep 0.1
  done
  [ -z "$left" ] || log "warning: processes still in cgroups $NODE_CGROUP: $(echo $left)"
  stop_proc containerd
  left="$(our_shims)"
  # shellcheck disable=SC2086
  [ -z "$left" ] || kill -KILL $left 2>/dev/null || true
  # 3. Mounts under the node directory (rootfs overlays, netns, volumes, tokens), deepest first.
  if [ -d "$NODE_DIR" ]; then
    local m
    for ((i = 0; i < 5; i++)); do
      mapfile -t m < <(findmnt -rn -o TARGET | grep -F "$NODE_DIR/" | sort -r)
      [ ${#m[@]} -gt 0 ] || break
      for t in "${m[@]}"; do umount "$t" 2>/dev/null || umount -l "$t" 2>/dev/null || true; done
    done
  fi
  # 4. cgroups, deepest first.
  local d
  for d in /sys/fs/cgroup/*/"$NODE_CGROUP"; do
    if [ -d "$d" ]; then find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true; fi
  done
  for d in /sys/fs/cgroup/*/"$NODE_CGROUP"; do
    if [ -d "$d" ]; then log "warning: could not remove cgroup $d"; fi
  done
  # 5. iptables: kube-proxy's chains, then the kubelet's.
  if [ -x "$BIN/kube-proxy" ] && [[ "$(iptables -w -t nat -S 2>/dev/null || true)" == *KUBE-* ]]; then
    "$BIN/kube-proxy" --cleanup --v=0 >/dev/null 2>&1 || true
  fi
  # Whatever KUBE-* chains are left -- the kubelet's own (kube-proxy --cleanup leaves them),
  # and kube-proxy's when its cleanup raced with its last sync (seen once after a long e2e
  # session under load): only one real node runs on a machine (check), so these are ours.
  remove_chains KUBE-
  if [ -d /var/log/containers ]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$NODE_DIR/*" -delete 2>/dev/null || true
    rmdir /var/log/containers 2>/dev/null || true
  fi
  # Everything but what network made (kept for network-down).
  find "$NODE_DIR" -mindepth 1 -maxdepth 1 ! -name sysctls -exec rm -rf {} + 2>/dev/null || true
}

# network-down: the bridge and what network set up. Only after the API server (which listens
# on the bridge's address) has stopped: with the address gone, a request to it would follow
# the machine's default route off this machine.
network_down() {
  local dir
  for dir in -i -o; do
    while iptables -w -D FORWARD "$dir" "$NODE_BRIDGE" -m comment --comment "$RULE_TAG" -j ACCEPT 2>/dev/null; do :; done
  done
  ip link del "$NODE_BRIDGE" 2>/dev/null || true
  if [ -f "$NODE_DIR/sysctls" ]; then
    local s v
    while read -r s v; do echo "$v" > "/proc/sys/$s" 2>/dev/null || true; done < "$NODE_DIR/sysctls"
  fi
  rm -rf "$NODE_DIR"
}

# leftovers [--network]: print, one per line, anything of the node still on this machine
# (after down; with --network also after network-down); exit 1 if there is any.
leftovers() {
  local found=() d args=() m c
  for d in /proc/[0-9]*; do
    mapfile -d '' args 2>/dev/null < "$d/cmdline" || continue
    [ ${#args[@]} -gt 0 ] || continue
    [[ "${args[*]}" == *"$NODE_DIR/"* ]] && found+=("process ${d#/proc/}: ${args[*]:0:2}")
  done
  while read -r m; do [ -n "$m" ] && found+=("mount $m"); done < <(findmnt -rn -o TARGET | grep -F "$NODE_DIR/" || true)
  for c in /sys/fs/cgroup/*/"$NODE_CGROUP"; do [ -d "$c" ] && found+=("cgroup $c"); done
  for c in $(pids_in_cgroups); do found+=("process $c in our cgroups"); done
  while read -r m; do [ -n "$m" ] && found+=("iptables: $m"); done \
    < <({ iptables-save; ip6tables-save; } 2>/dev/null | grep -E '^(-A|:)KUBE-' || true)
  if [ "${1:-}" = --network ]; then
    ip link show "$NODE_BRIDGE" >/dev/null 2>&1 && found+=("bridge $NODE_BRIDGE")
    while read -r m; do [ -n "$m" ] && found+=("iptables: $m"); done \
      < <(iptables-save 2>/dev/null | grep -F "$RULE_TAG" || true)
    [ ! -e "$NODE_DIR" ] || found+=("directory $NODE_DIR")
  fi
  [ -n "$(ip -o link show master "$NODE_BRIDGE" 2>/dev/null)" ] && found+=("veths on $NODE_BRIDGE: $(ip -o link show master "$NODE_BRIDGE" | wc -l)")
  while read -r m; do [ -n "$m" ] && found+=("cilium: $m"); done < <("$CLUSTER_DIR/cilium.sh" leftovers 2>/dev/null || true)
  [ ${#found[@]} -eq 0 ] && return 0
  printf '%s\n' "${found[@]}"
  return 1
}

case "${1:-}" in
  check) check ;;
  network) network ;;
  start) start ;;
  load) shift; load "$@" ;;
  kill) shift; kill_container "$@" ;;
  tag) shift; tag_image "$@" ;;
  netcut) shift; netcut "$@" ;;
  down) down ;;
  network-down) network_down ;;
  leftovers) shift; leftovers "$@" ;;
  *) die "usage: node.sh check|network|start|load TAR...|kill ID [SIGNAL]|tag SRC DST|netcut ID on|off|down|network-down|leftovers [--network]" ;;
esac
