#!/usr/bin/env bash
# Start the local cluster as plain processes:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, and the KWOK controller,
# then register $KWOK_NODES fake KWOK nodes, then the real node (hack/cluster/node.sh:
# containerd, kubelet, kube-proxy, CoreDNS; KERASJOB_NODE=0 leaves it out). State (certificates, etcd data, logs, pid files,
# kubeconfig) lives in $KERASJOB_RUN/cluster/; hack/cluster/down.sh removes it.
#
#   hack/cluster/up.sh           start it (or confirm it is up)
#   hack/cluster/up.sh --check   exit 0 when it is up and healthy, 1 otherwise
#
# Idempotent: when the cluster is already up and healthy it says so and exits 0; when a
# previous run left a broken or partial cluster behind, it is torn down and started afresh.
# Env overrides: see hack/cluster/lib.sh and hack/cluster/README.md (ports, KWOK_NODES,
# CLUSTER_READY_TIMEOUT, <COMPONENT>_EXTRA_ARGS).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

READY_TIMEOUT="${CLUSTER_READY_TIMEOUT:-90}"
BIN="$(bin_dir)"
KUBECONFIG_FILE="$STATE_DIR/kubeconfig"
SERVER="$API_SERVER_URL"

api() {  # api PATH: GET an API path with the admin client certificate; prints the body
  curl -fsS --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$SERVER$1"
}
kctl() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

healthy() {
  local c
  for c in "${UP_COMPONENTS[@]}"; do alive "$c" || return 1; done
  [ "$(api /readyz 2>/dev/null)" = ok ] || return 1
  [ "$(cat "$STATE_DIR/settings" 2>/dev/null)" = "$(cluster_settings)" ] || return 1
  local want="$KWOK_NODES" ready
  ready="$(kctl get nodes -l type=kwok -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null | grep -c True || true)"
  [ "$ready" -ge "$want" ] || return 1
  [ "$KERASJOB_NODE" = 1 ] || return 0
  for c in "${NODE_COMPONENTS[@]}"; do alive "$c" || return 1; done
  [ "$(kctl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

if [ "${1:-}" = --check ]; then  # exit 0 when up and healthy, 1 otherwise; no output
  [ -d "$STATE_DIR" ] && healthy
  exit
fi
[ -z "${1:-}" ] || die "unknown argument '$1' (usage: up.sh [--check])"
need=("${CLUSTER_BINARIES[@]}")
! kwok_runs || need+=(kwok)
for b in "${need[@]}"; do
  [ -x "$BIN/$b" ] || die "missing $BIN/$b: run 'make binaries' (hack/cluster/build.sh) first"
done
command -v openssl >/dev/null || die "openssl not found: apt-get install openssl"
command -v curl >/dev/null || die "curl not found: apt-get install curl"
[ "$KERASJOB_NODE" != 1 ] || "$CLUSTER_DIR/node.sh" check

cluster_lock
if [ -d "$STATE_DIR" ]; then
  if healthy; then
    log "cluster already up and healthy ($SERVER, kubeconfig $KUBECONFIG_FILE)"
    exit 0
  fi
  log "found a stale or partial cluster in $STATE_DIR; tearing it down first"
  "$CLUSTER_DIR/down.sh"
fi

declare -A PORT_ENV=(
  [$ETCD_PORT]=ETCD_PORT [$ETCD_PEER_PORT]=ETCD_PEER_PORT [$APISERVER_PORT]=APISERVER_PORT
  [$KCM_PORT]=KCM_PORT [$SCHEDULER_PORT]=SCHEDULER_PORT [$KWOK_PORT]=KWOK_PORT
)
read -r eph_lo eph_hi < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || eph_lo=32768 eph_hi=60999
for port in "${!PORT_ENV[@]}"; do
  if [ "$port" -ge "$eph_lo" ] && [ "$port" -le "$eph_hi" ]; then
    log "warning: ${PORT_ENV[$port]}=$port is in the ephemeral port range $eph_lo-$eph_hi; outgoing connections may take it (prefer ports below $eph_lo)"
  fi
  if port_in_use "$port"; then
    die "port $port (${PORT_ENV[$port]}) is already in use on 127.0.0.1: run 'make cluster-down' if it is an old local cluster, or pick another port with ${PORT_ENV[$port]}=<port>"
  fi
done

start=$(date +%s.%N)
# The API server binds to the node's bridge address: the bridge comes first.
[ "$KERASJOB_NODE" != 1 ] || "$CLUSTER_DIR/node.sh" network
mkdir -p "$PKI" "$LOGS" "$PIDS" "$STATE_DIR/etcd"
chmod 700 "$STATE_DIR" "$PKI"
# Started by a program (tests, demo): the last of its users stops it again. A cluster started
# by hand (no marker) is never stopped by them (dev/kerasjob_dev/localcluster.py).
if [ -n "${KERASJOB_CLUSTER_OWNER:-}" ]; then touch "$STATE_DIR/managed"; fi

# --- certificates (EC P-256: fast to generate) ------------------------------------------
gen_key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; }
(
  cd "$PKI"
  gen_key ca.key
  openssl req -x509 -new -key ca.key -sha256 -days 3650 -subj "/CN=kerasjob-local-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out ca.crt 2>/dev/null
  sign() {  # sign NAME SUBJECT EXTFILE-CONTENT
    gen_key "$1.key"
    openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
    printf '%s\n' "$3" > "$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -sha256 \
      -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
  }
  sign apiserver "/CN=kube-apiserver" "$(printf '%s\n' \
    "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth" \
    "subjectAltName=IP:127.0.0.1,IP:$APISERVER_ADVERTISE_ADDRESS,IP:${APISERVER_BIND_ADDRESS/0.0.0.0/127.0.0.1},IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local")"
  # The API server's client certificate towards kubelets (logs, exec, port-forward).
  sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$(printf '%s\n' \
    "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=clientAuth")"
  sign admin "/O=system:masters/CN=kubernetes-admin" "$(printf '%s\n' \
    "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=clientAuth")"
  # Service-account token signing key pair.
  gen_key sa.key
  openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
) || die "certificate generation with openssl failed"

b64() { base64 -w0 < "$1"; }
cat > "$KUBECONFIG_FILE" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kerasjob-local
  cluster:
    server: $SERVER
    certificate-authority-data: $(b64 "$PKI/ca.crt")
users:
- name: kerasjob-admin
  user:
    client-certificate-data: $(b64 "$PKI/admin.crt")
    client-key-data: $(b64 "$PKI/admin.key")
contexts:
- name: kerasjob-local
  context: {cluster: kerasjob-local, user: kerasjob-admin}
current-context: kerasjob-local
EOF
chmod 600 "$KUBECONFIG_FILE"

# --- processes (launch: lib.sh) --------------------------------------------------------

# Feature gates and runtime config (lib.sh: KUBE_FEATURE_GATES, KUBE_RUNTIME_CONFIG).
gates=(); [ -z "$KUBE_FEATURE_GATES" ] || gates=(--feature-gates="$KUBE_FEATURE_GATES")
runtime=(); [ -z "$KUBE_RUNTIME_CONFIG" ] || runtime=(--runtime-config="$KUBE_RUNTIME_CONFIG")
cluster_settings > "$STATE_DIR/settings"

# shellcheck disable=SC2086  # *_EXTRA_ARGS are word-split on purpose
# etcd reads ETCD_* variables as flags: drop ours from its environment.
launch etcd env -u ETCD_PORT -u ETCD_PEER_PORT -u ETCD_EXTRA_ARGS "$BIN/etcd" \
  --name=kerasjob-local --data-dir="$STATE_DIR/etcd" \
  --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster="kerasjob-local=http://127.0.0.1:$ETCD_PEER_PORT" \
  --unsafe-no-fsync=true --snapshot-count=100000 --log-level=warn ${ETCD_EXTRA_ARGS:-}

# The `kubernetes` Service's endpoints cannot be a loopback address (validation rejects it),
# so with the default 127.0.0.1 the endpoint reconciler is off.
endpoint_reconciler=lease
case "$APISERVER_ADVERTISE_ADDRESS" in 127.*) endpoint_reconciler=none ;; esac
# shellcheck disable=SC2086
launch kube-apiserver "$BIN/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
  --bind-address="$APISERVER_BIND_ADDRESS" --advertise-address="$APISERVER_ADVERTISE_ADDRESS" \
  --secure-port="$APISERVER_PORT" \
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
  --client-ca-file="$PKI/ca.crt" \
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --authorization-mode=Node,RBAC \
  --service-cluster-ip-range=10.96.0.0/16 \
  --allow-privileged=true \
  --endpoint-reconciler-type="$endpoint_reconciler" \
  --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types=InternalIP,Hostname \
  --profiling=false "${gates[@]}" "${runtime[@]}" \
  --v=1 ${APISERVER_EXTRA_ARGS:-}

# shellcheck disable=SC2086
launch kube-controller-manager "$BIN/kube-controller-manager" \
  --kubeconfig="$KUBECONFIG_FILE" \
  --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
  --leader-elect=false \
  --controllers='*' \
  --use-service-account-credentials=true \
  --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
  --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
  --service-cluster-ip-range=10.96.0.0/16 \
  --profiling=false "${gates[@]}" \
  --v=1 ${KCM_EXTRA_ARGS:-}

# shellcheck disable=SC2086
launch kube-scheduler "$BIN/kube-scheduler" \
  --kubeconfig="$KUBECONFIG_FILE" \
  --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" \
  --leader-elect=false --profiling=false "${gates[@]}" \
  --v=1 ${SCHEDULER_EXTRA_ARGS:-}

# KWOK manages only nodes annotated kwok.x-k8s.io/node=fake, so a real node agent's Node and
# its Pods are left alone. No KWOK node (KWOK_NODES=0, the demo): no KWOK controller.
# shellcheck disable=SC2086
! kwok_runs || launch kwok "$BIN/kwok" \
  --config="$CLUSTER_DIR/kwok-stages.yaml" \
  --kubeconfig="$KUBECONFIG_FILE" \
  --manage-all-nodes=false \
  --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --node-ip=127.0.0.1 --node-port="$KWOK_PORT" --server-address="127.0.0.1:$KWOK_PORT" \
  --cidr=10.244.0.0/16 \
  --node-lease-duration-seconds=40 ${KWOK_EXTRA_ARGS:-}

fail() {  # fail MESSAGE: print the message, the tails of the logs, tear down, exit 1
  echo "$(basename "$0"): $1" >&2
  local c
  for c in "${UP_COMPONENTS[@]}"; do
    echo "----- $c ($(alive "$c" && echo running || echo NOT running)): tail of $LOGS/$c.log" >&2
    tail -n 15 "$LOGS/$c.log" >&2 2>/dev/null || true
  done
  if [ "${KEEP_FAILED_CLUSTER:-0}" = 1 ]; then
    echo "$(basename "$0"): KEEP_FAILED_CLUSTER=1: left it running; 'make cluster-down' removes it" >&2
  else
    "$CLUSTER_DIR/down.sh" >/dev/null 2>&1 || true
    echo "$(basename "$0"): tore the cluster down (KEEP_FAILED_CLUSTER=1 keeps it for debugging)" >&2
  fi
  exit 1
}
deadline=$((SECONDS + READY_TIMEOUT))
check_alive_and_time() {  # check_alive_and_time WHAT
  local c
  for c in "${UP_COMPONENTS[@]}"; do alive "$c" || fail "$c exited while waiting for $1"; done
  [ "$SECONDS" -lt "$deadline" ] || fail "timed out after ${READY_TIMEOUT}s waiting for $1 (CLUSTER_READY_TIMEOUT raises it)"
}

until [ "$(api /readyz 2>/dev/null)" = ok ]; do
  check_alive_and_time "kube-apiserver /readyz"; sleep 0.2
done
api_ready=$(date +%s.%N)

# --- fake KWOK nodes --------------------------------------------------------------------
nodes() {
  local i
  echo '{"apiVersion": "v1", "kind": "List", "items": ['
  for ((i = 0; i < KWOK_NODES; i++)); do
    [ "$i" = 0 ] || echo ','
    cat <<EOF
{"apiVersion": "v1", "kind": "Node",
 "metadata": {"name": "kwok-node-$i",
   "labels": {"type": "kwok", "kubernetes.io/hostname": "kwok-node-$i", "kubernetes.io/os": "linux",
              "kubernetes.io/arch": "amd64", "kubernetes.io/role": "agent", "node-role.kubernetes.io/agent": ""},
   "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
 "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]},
 "status": {"capacity": {"cpu": "1000", "memory": "4Ti", "pods": "1000", "ephemeral-storage": "10Ti"},
            "allocatable": {"cpu": "1000", "memory": "4Ti", "pods": "1000", "ephemeral-storage": "10Ti"}}}
EOF
  done
  echo ']}'
}
if [ "$KWOK_NODES" -gt 0 ]; then
  nodes | kctl create -f - > /dev/null || fail "could not create the KWOK nodes"
fi

# --- wait: nodes Ready, default ServiceAccount, controllers healthy ----------------------
until [ "$(kctl get nodes -l type=kwok -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null | grep -c True || true)" -ge "$KWOK_NODES" ]; do
  check_alive_and_time "$KWOK_NODES KWOK nodes to become Ready"; sleep 0.2
done
nodes_ready=$(date +%s.%N)
until api /api/v1/namespaces/default/serviceaccounts/default > /dev/null 2>&1; do
  check_alive_and_time "the default ServiceAccount in namespace default"; sleep 0.2
done
if [ "$KERASJOB_NODE" = 1 ]; then
  "$CLUSTER_DIR/node.sh" start || fail "the real node did not start"
fi
end=$(date +%s.%N)

secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
log "cluster up in $(secs "$start" "$end") s (API server ready after $(secs "$start" "$api_ready") s, nodes Ready after $(secs "$start" "$nodes_ready") s); Kubernetes $KUBE_VERSION, $KWOK_NODES KWOK nodes$([ "$KERASJOB_NODE" = 1 ] && echo ", real node $NODE_NAME")"
log "  kubeconfig: $KUBECONFIG_FILE   (eval \"\$(make -s cluster-env)\" for kubectl/helm)"
log "  logs:       $LOGS"
