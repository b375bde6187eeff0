#!/usr/bin/env bash
# Kueue on the local cluster: its controller manager built from the Go module (pinned in
# hack/cluster/kueue/gomod), run as a process against our API server, with its webhooks.
#
#   hack/cluster/kueue.sh build     build (or confirm) the cached binary
#   hack/cluster/kueue.sh up        build if needed, install the CRDs, start the manager,
#                                   register its webhooks; idempotent
#   hack/cluster/kueue.sh down      unregister the webhooks, stop the manager
#   hack/cluster/kueue.sh --bin     print the binary's path
#
# Opt-in: nothing else builds or starts it (the tests that need Kueue call `up`; down.sh
# stops it with the cluster). The module is outside hack/cluster/gomod on purpose, so its
# pin does not move the shared binary directory of the other components.
#
# How the API server reaches the webhooks: it runs on the host, with no route to Service
# IPs in a KWOK-only cluster, so every webhook (admission and CRD conversion) gets a
# URL-based clientConfig, https://127.0.0.1:$KUEUE_WEBHOOK_PORT/<path>. The certificates:
# Kueue's internal cert management stays on (off, v0.16 insists on metrics certificates
# at the fixed path /etc/kueue/metrics/certs), and finds in its Secret the CA and serving
# certificate made here, valid both for its Service's DNS name (what it checks) and for IP
# 127.0.0.1 (what the API server checks), so it keeps them and injects the CA into the
# webhook configurations and CRDs it knows by name. The webhook list is Kueue's own
# config/components/webhook/manifests.yaml from the module cache, kept to the
# kueue.x-k8s.io resources (the manager serves only the integrations it enables), and the
# CRDs are config/components/crd/bases, both read at run time.
#
# Feature gates: ElasticJobsViaWorkloadSlices on (elastic KerasJobs' Workloads follow their
# size; alpha, off in Kueue by default), VisibilityOnDemand off.
#
# Env: KUEUE_WEBHOOK_PORT (20290), KUEUE_HEALTH_PORT (20291), KUEUE_FEATURE_GATES,
# KUEUE_READY_TIMEOUT (60 s), KUEUE_PODS_READY_TIMEOUT (e.g. 20s: Kueue's waitForPodsReady,
# evicting a workload whose Pods are not all ready in time; requeued after 5-10 s; default
# off), KUEUE_DEVICE_CLASS_MAPPINGS (e.g. `kerasjob.dev/fake-gpu=fake-gpu.kerasjob.dev`:
# space-separated `resource=deviceClass[,deviceClass...]`, Kueue's deviceClassMappings, so
# that with its DynamicResourceAllocation gate in KUEUE_FEATURE_GATES the devices a
# Workload's ResourceClaimTemplates ask for count against that quota; default none); the
# cluster's variables (lib.sh) as for up.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KUEUE_GOMOD="$CLUSTER_DIR/kueue/gomod"
KUEUE_VERSION="$(awk '$1 == "require" && $2 == "sigs.k8s.io/kueue" {print $3}' "$KUEUE_GOMOD/go.mod")"
KUEUE_WEBHOOK_PORT="${KUEUE_WEBHOOK_PORT:-20290}"
KUEUE_HEALTH_PORT="${KUEUE_HEALTH_PORT:-20291}"
KUEUE_READY_TIMEOUT="${KUEUE_READY_TIMEOUT:-60}"
# The on-demand visibility API is an aggregated API server of its own: not needed here.
KUEUE_FEATURE_GATES="${KUEUE_FEATURE_GATES:-VisibilityOnDemand=false,ElasticJobsViaWorkloadSlices=true}"
KUEUE_DIR="$STATE_DIR/kueue"
KUBECONFIG_FILE="$STATE_DIR/kubeconfig"
# Names Kueue's cert management derives its objects' names from (kueue-<type>-webhook-configuration).
WEBHOOK_SERVICE="kueue-webhook-service"
WEBHOOK_SECRET="kueue-webhook-server-cert"
KUEUE_NS="kueue-system"
# The kind the operator integrates (Kueue's externalFrameworks format: Kind.version.group).
EXTERNAL_FRAMEWORK="KerasJob.v1alpha1.kerasjob.dev"

BIN_KUEUE="$(addon_bin kueue "$KUEUE_GOMOD" "$KUEUE_VERSION")"

build() {
  addon_build kueue "$KUEUE_GOMOD" "$BIN_KUEUE" sigs.k8s.io/kueue/cmd/kueue \
    -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION"
}

kctl() { "$(bin_dir)/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

module_dir() { go_module_dir "$KUEUE_GOMOD" sigs.k8s.io/kueue; }

certs() {  # the webhook CA and serving certificate, in the Secret Kueue's cert management reads
  local d="$KUEUE_DIR/pki"
  webhook_certs "$d" kueue "$WEBHOOK_SERVICE.$KUEUE_NS.svc"
  rm -rf "$KUEUE_DIR/certs"
  mkdir -p "$KUEUE_DIR/certs"
  # In a Pod the Secret is mounted at the cert dir; here the files are put there.
  cp "$d/tls.crt" "$d/tls.key" "$KUEUE_DIR/certs/"
  kctl -n "$KUEUE_NS" delete secret "$WEBHOOK_SECRET" --ignore-not-found >/dev/null
  kctl -n "$KUEUE_NS" create secret generic "$WEBHOOK_SECRET" --from-file="$d/ca.crt" \
    --from-file="$d/ca.key" --from-file="$d/tls.crt" --from-file="$d/tls.key" >/dev/null
}

config() {
  cat > "$KUEUE_DIR/config.yaml" <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: $KUEUE_NS
health:
  healthProbeBindAddress: 127.0.0.1:$KUEUE_HEALTH_PORT
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: $KUEUE_WEBHOOK_PORT
  certDir: $KUEUE_DIR/certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: true
  webhookServiceName: $WEBHOOK_SERVICE
  webhookSecretName: $WEBHOOK_SECRET
clientConnection:
  qps: 50
  burst: 100
integrations:
  frameworks: ["batch/job"]
  externalFrameworks: ["$EXTERNAL_FRAMEWORK"]
EOF
  if [ -n "${KUEUE_DEVICE_CLASS_MAPPINGS:-}" ]; then
    local m
    echo "resources:" >> "$KUEUE_DIR/config.yaml"
    echo "  deviceClassMappings:" >> "$KUEUE_DIR/config.yaml"
    for m in $KUEUE_DEVICE_CLASS_MAPPINGS; do
      printf '  - name: %s\n    deviceClassNames: [%s]\n' "${m%%=*}" "${m#*=}" >> "$KUEUE_DIR/config.yaml"
    done
  fi
  if [ -n "${KUEUE_PODS_READY_TIMEOUT:-}" ]; then
    cat >> "$KUEUE_DIR/config.yaml" <<EOF
waitForPodsReady:
  timeout: $KUEUE_PODS_READY_TIMEOUT
  blockAdmission: false
  requeuingStrategy: {timestamp: Eviction, backoffBaseSeconds: 5, backoffMaxSeconds: 10}
EOF
  fi
}

crds() {  # Kueue's CRDs; the ones with a conversion webhook point it at the manager
  local src="$1" ca; ca="$(base64 -w0 < "$KUEUE_DIR/pki/ca.crt")"
  kctl apply --server-side --force-conflicts -f "$src/config/components/crd/bases" >/dev/null
  local p crd
  for p in "$src"/config/components/crd/patches/webhook_in_*.yaml; do
    crd="$(awk '/^  name:/ {print $2; exit}' "$p")"
    # Only the patches kustomization.yaml applies (resourceflavors' is commented out there).
    grep -q "^- path: patches/$(basename "$p")" "$src/config/components/crd/kustomization.yaml" || continue
    kctl patch crd "$crd" --type=merge -p "{\"spec\":{\"conversion\":{\"strategy\":\"Webhook\",\"webhook\":{\"conversionReviewVersions\":[\"v1\"],\"clientConfig\":{\"url\":\"https://127.0.0.1:$KUEUE_WEBHOOK_PORT/convert\",\"caBundle\":\"$ca\"}}}}}" >/dev/null
  done
  kctl wait --for=condition=Established --timeout=60s -f "$src/config/components/crd/bases" >/dev/null
}

webhooks() {  # Kueue's admission webhooks for its own resources, by URL
  local src="$1" ca; ca="$(base64 -w0 < "$KUEUE_DIR/pki/ca.crt")"
  kctl create --dry-run=client -o json -f "$src/config/components/webhook/manifests.yaml" \
    | jq -s --arg base "https://127.0.0.1:$KUEUE_WEBHOOK_PORT" --arg ca "$ca" --arg prefix "${WEBHOOK_SERVICE%-webhook-service}" '
        {apiVersion: "v1", kind: "List", items: [.[] | if .kind == "List" then .items[] else . end
          | .metadata = {name: ($prefix + "-" + .metadata.name)}
          | .webhooks |= map(
              select(any(.rules[]; .apiGroups | index("kueue.x-k8s.io")))
              | .clientConfig = {url: ($base + .clientConfig.service.path), caBundle: $ca})]}' \
    | kctl apply -f - >/dev/null
}

up() {
  [ -f "$KUBECONFIG_FILE" ] || die "no cluster at $STATE_DIR: start it first (hack/cluster/up.sh)"
  command -v jq >/dev/null || die "jq not found: apt-get install jq"
  build
  # What the manager runs with: one already running with other settings is restarted.
  local settings="gates=$KUEUE_FEATURE_GATES podsReady=${KUEUE_PODS_READY_TIMEOUT:-}"
  [ -z "${KUEUE_DEVICE_CLASS_MAPPINGS:-}" ] || settings+=" deviceClasses=$KUEUE_DEVICE_CLASS_MAPPINGS"
  if alive kueue && curl -fsS --max-time 2 "http://127.0.0.1:$KUEUE_HEALTH_PORT/readyz" >/dev/null 2>&1; then
    if [ "$(cat "$KUEUE_DIR/settings" 2>/dev/null)" = "$settings" ]; then
      log "Kueue already running (pid $(cat "$PIDS/kueue.pid"))"; return 0
    fi
    log "Kueue running with other settings than $settings: restarting it"
    down
  fi
  local t0; t0="$(date +%s.%N)"
  local src; src="$(module_dir)"
  [ -d "$src/config/components/crd/bases" ] || die "Kueue module source not found ($src)"
  for port in "$KUEUE_WEBHOOK_PORT" "$KUEUE_HEALTH_PORT"; do
    port_in_use "$port" && die "port $port (KUEUE_WEBHOOK_PORT/KUEUE_HEALTH_PORT) is already in use"
  done
  mkdir -p "$KUEUE_DIR"
  kctl create namespace "$KUEUE_NS" --dry-run=client -o yaml | kctl apply -f - >/dev/null
  certs; config
  crds "$src"
  # Before the manager: its cert bootstrap waits until it has injected the CA into them.
  webhooks "$src"
  KUBECONFIG="$KUBECONFIG_FILE" launch kueue "$BIN_KUEUE" --config="$KUEUE_DIR/config.yaml" \
    --kubeconfig="$KUBECONFIG_FILE" --feature-gates="$KUEUE_FEATURE_GATES" --zap-log-level=2
  echo "$settings" > "$KUEUE_DIR/settings"
  local i
  for ((i = 0; i < KUEUE_READY_TIMEOUT * 4; i++)); do
    alive kueue || { tail -30 "$LOGS/kueue.log" >&2; die "the Kueue manager exited"; }
    # Ready, and its webhook server answers TLS with our certificate (any HTTP status).
    if curl -fsS --max-time 2 "http://127.0.0.1:$KUEUE_HEALTH_PORT/readyz" >/dev/null 2>&1 \
      && curl -sS --max-time 2 --cacert "$KUEUE_DIR/pki/ca.crt" -o /dev/null \
         "https://127.0.0.1:$KUEUE_WEBHOOK_PORT/" 2>/dev/null; then
      break
    fi
    sleep 0.25
  done
  ((i < KUEUE_READY_TIMEOUT * 4)) || { tail -30 "$LOGS/kueue.log" >&2; die "Kueue not ready in ${KUEUE_READY_TIMEOUT}s"; }
  log "Kueue $KUEUE_VERSION ready in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s (webhooks on 127.0.0.1:$KUEUE_WEBHOOK_PORT, log $LOGS/kueue.log)"
}

down() {
  if [ -f "$KUBECONFIG_FILE" ]; then
    kctl delete mutatingwebhookconfiguration kueue-mutating-webhook-configuration --ignore-not-found >/dev/null 2>&1 || true
    kctl delete validatingwebhookconfiguration kueue-validating-webhook-configuration --ignore-not-found >/dev/null 2>&1 || true
  fi
  stop_proc kueue 10
}

case "${1:-}" in
  build) build; log "Kueue $KUEUE_VERSION: $BIN_KUEUE" ;;
  up) up ;;
  down) down ;;
  --bin) echo "$BIN_KUEUE" ;;
  *) die "usage: kueue.sh build | up | down | --bin" ;;
esac
