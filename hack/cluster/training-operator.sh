#!/usr/bin/env bash
# Kubeflow's training-operator (v1) on the local cluster, for bench/compare_tfjob.py: its
# manager built from the Go module (pinned in hack/cluster/training-operator/gomod), run as a
# process against our API server, serving TFJobs only.
#
#   hack/cluster/training-operator.sh build   build (or confirm) the cached binary
#   hack/cluster/training-operator.sh up      build if needed, install the TFJob CRD, start
#                                             the manager; idempotent
#   hack/cluster/training-operator.sh down    stop the manager (the CRD stays)
#   hack/cluster/training-operator.sh --bin   print the binary's path
#
# Opt-in: nothing else builds or starts it. Its module is outside hack/cluster/gomod, so its
# pin does not move the shared binary directory of the other components. down.sh stops it
# with the cluster.
#
# What it runs: `--enable-scheme=tfjob`, no gang scheduler, no leader election, metrics and
# health probes on 127.0.0.1 (TRAINING_OPERATOR_METRICS_PORT, TRAINING_OPERATOR_HEALTH_PORT),
# the client's default rate limits (20 QPS, burst 30) and its default (development) logging,
# as its Deployment runs it; log in $STATE_DIR/training-operator/manager.log. Only the TFJob
# CRD is installed (manifests/base/crds/kubeflow.org_tfjobs.yaml, read from the module cache
# at run time); no webhook configuration is registered, so the API server never calls it.
#
# Certificates: the manager always starts cert-controller's rotator and its webhook server, and
# gates its controllers on them: the rotator needs the Secret kubeflow/
# training-operator-webhook-cert and the serving certificate as a file in the fixed directory
# /tmp/k8s-webhook-server/serving-certs (a mounted Secret in its Pod), where the webhook server
# also reads it. Here a self-signed CA and serving certificate are made in the state
# directory and put in the Secret (valid, so the rotator keeps them), and the manager runs in a
# private mount namespace (unshare, root) with $STATE_DIR/training-operator/tmp bound over
# /tmp, so those files live in the state directory, not in the machine's /tmp. The webhook
# configuration the rotator would inject its CA into does not exist: it logs that and goes on.
#
# Env: TRAINING_OPERATOR_METRICS_PORT (20390), TRAINING_OPERATOR_HEALTH_PORT (20391),
# TRAINING_OPERATOR_WEBHOOK_PORT (20392; the webhook server binds all interfaces, nothing
# calls it), TRAINING_OPERATOR_READY_TIMEOUT (60 s), TRAINING_OPERATOR_EXTRA_ARGS (more
# flags, e.g. "--kube-api-qps=100 --kube-api-burst=200"; read when it starts, not by a
# running one); the cluster's variables (lib.sh).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TO_GOMOD="$CLUSTER_DIR/training-operator/gomod"
TO_MODULE="github.com/kubeflow/training-operator"
TO_VERSION="$(awk -v m="$TO_MODULE" '$1 == "require" && $2 == m {print $3}' "$TO_GOMOD/go.mod")"
TO_METRICS_PORT="${TRAINING_OPERATOR_METRICS_PORT:-20390}"
TO_HEALTH_PORT="${TRAINING_OPERATOR_HEALTH_PORT:-20391}"
TO_WEBHOOK_PORT="${TRAINING_OPERATOR_WEBHOOK_PORT:-20392}"
TO_READY_TIMEOUT="${TRAINING_OPERATOR_READY_TIMEOUT:-60}"
TO_DIR="$STATE_DIR/training-operator"
TO_LOG="$TO_DIR/manager.log"
KUBECONFIG_FILE="$STATE_DIR/kubeconfig"
# The names the manager derives (its defaults): namespace, Service (the certificate's DNS
# name), Secret.
TO_NS="kubeflow"
WEBHOOK_SERVICE="training-operator"
WEBHOOK_SECRET="training-operator-webhook-cert"

BIN_TO="$(addon_bin training-operator "$TO_GOMOD" "$TO_VERSION")"

build() {
  addon_build training-operator "$TO_GOMOD" "$BIN_TO" "$TO_MODULE/cmd/training-operator.v1" \
    -ldflags "-s -w"
}

kctl() { "$(bin_dir)/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

module_dir() { go_module_dir "$TO_GOMOD" "$TO_MODULE"; }

certs() {  # CA + serving certificate: files for the webhook server, the Secret for the rotator
  local d="$TO_DIR/pki" certdir="$TO_DIR/tmp/k8s-webhook-server/serving-certs"
  webhook_certs "$d" training-operator "$WEBHOOK_SERVICE.$TO_NS.svc"
  rm -rf "$certdir"
  mkdir -p "$certdir"
  cp "$d/tls.crt" "$d/tls.key" "$certdir/"
  kctl -n "$TO_NS" delete secret "$WEBHOOK_SECRET" --ignore-not-found >/dev/null
  kctl -n "$TO_NS" create secret generic "$WEBHOOK_SECRET" --from-file="$d/ca.crt" \
    --from-file="$d/ca.key" --from-file="$d/tls.crt" --from-file="$d/tls.key" >/dev/null
}

up() {
  [ -f "$KUBECONFIG_FILE" ] || die "no cluster at $STATE_DIR: start it first (hack/cluster/up.sh)"
  command -v unshare >/dev/null || die "unshare not found (util-linux)"
  build
  if alive training-operator && curl -fsS --max-time 2 "http://127.0.0.1:$TO_HEALTH_PORT/readyz" >/dev/null 2>&1; then
    log "training-operator already running (pid $(cat "$PIDS/training-operator.pid"))"; return 0
  fi
  stop_proc training-operator 10
  local t0; t0="$(date +%s.%N)"
  local crd; crd="$(module_dir)/manifests/base/crds/kubeflow.org_tfjobs.yaml"
  [ -f "$crd" ] || die "training-operator module source not found ($crd)"
  local port i
  for port in "$TO_METRICS_PORT" "$TO_HEALTH_PORT" "$TO_WEBHOOK_PORT"; do
    port_in_use "$port" && die "port $port (TRAINING_OPERATOR_{METRICS,HEALTH,WEBHOOK}_PORT) is already in use"
  done
  mkdir -p "$TO_DIR/tmp"
  kctl apply --server-side --force-conflicts -f "$crd" >/dev/null
  # Polled: `kubectl wait` fails outright on a CRD whose status has no conditions yet.
  for ((i = 0; i < 240; i++)); do
    [ "$(kctl get crd tfjobs.kubeflow.org -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" = True ] && break
    sleep 0.25
  done
  ((i < 240)) || die "the TFJob CRD not Established in 60 s"
  kctl create namespace "$TO_NS" --dry-run=client -o yaml | kctl apply -f - >/dev/null
  certs
  # /tmp inside its mount namespace is $TO_DIR/tmp: the kubeconfig goes there, and the binary
  # is opened before the bind (its cache may be under /tmp) and run as "training-operator"
  # (its argv[0], hence its user agent).
  cp "$KUBECONFIG_FILE" "$TO_DIR/tmp/kubeconfig"
  # launch (lib.sh), but logging to $TO_DIR/manager.log.
  setsid unshare --mount --propagation private -- bash -c \
    'exec 3<"$1" && mount --bind "$2" /tmp && shift 2 && exec -a training-operator /proc/self/fd/3 "$@"' \
    bash "$BIN_TO" "$TO_DIR/tmp" \
    --kubeconfig=/tmp/kubeconfig --enable-scheme=tfjob --leader-elect=false \
    --metrics-bind-address="127.0.0.1:$TO_METRICS_PORT" --health-probe-bind-address="127.0.0.1:$TO_HEALTH_PORT" \
    --webhook-server-port="$TO_WEBHOOK_PORT" ${TRAINING_OPERATOR_EXTRA_ARGS:-} >> "$TO_LOG" 2>&1 < /dev/null 8>&- 9>&- &
  echo $! > "$PIDS/training-operator.pid"
  for ((i = 0; i < TO_READY_TIMEOUT * 4; i++)); do
    alive training-operator || { tail -30 "$TO_LOG" >&2; die "the training-operator manager exited"; }
    curl -fsS --max-time 2 "http://127.0.0.1:$TO_HEALTH_PORT/readyz" >/dev/null 2>&1 && break
    sleep 0.25
  done
  ((i < TO_READY_TIMEOUT * 4)) || { tail -30 "$TO_LOG" >&2; die "training-operator not ready in ${TO_READY_TIMEOUT}s"; }
  log "training-operator $TO_VERSION ready in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s (pid $(cat "$PIDS/training-operator.pid"), log $TO_LOG)"
}

down() {
  stop_proc training-operator 10
}

case "${1:-}" in
  build) build; log "training-operator $TO_VERSION: $BIN_TO" ;;
  up) up ;;
  down) down ;;
  --bin) echo "$BIN_TO" ;;
  *) die "usage: training-operator.sh build | up | down | --bin" ;;
esac
