#!/usr/bin/env bash
# End-to-end tests on kind: create a 3-node kind cluster, build and load the dev images,
# give it ReadWriteMany checkpoint storage, install the Helm chart, train examples/mnist.yaml
# through a worker deletion under the installed operator, run the e2e suite against the
# cluster (KERASJOB_TEST_CLUSTER=current), delete the cluster.  Entry point: `make kind-e2e`.
#
# Needs: docker (with a running daemon), kind, and kubectl + helm (ours from `make binaries`
# when built, otherwise whatever is on PATH).
#
# Environment (all optional):
#   KIND_CLUSTER_NAME   cluster name                         (default kerasjob-e2e)
#   KIND_NODE_IMAGE     kindest/node image, to pick the Kubernetes version (default: kind's)
#   KIND_SHARED_DIR     host directory shared by all nodes    (default /tmp/kerasjob-kind-shared)
#   KEEP_CLUSTER=1      keep the cluster afterwards (KUBECONFIG is printed)
#   SKIP_IMAGES=1       do not rebuild the images (they must exist locally)
#   PYTEST_ARGS         extra pytest arguments, e.g. "-k mnist -x"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

die() { echo "kind-e2e: $*" >&2; exit 1; }
log() { echo "kind-e2e: $*" >&2; }

CLUSTER="${KIND_CLUSTER_NAME:-kerasjob-e2e}"
SHARED_DIR="${KIND_SHARED_DIR:-/tmp/kerasjob-kind-shared}"
RUN_DIR="${KERASJOB_RUN:-$PWD/.run}/kind"
NAMESPACE=kerasjob-system
SMOKE_NS=kerasjob-examples
OPERATOR_IMAGE=kerasjob/operator:dev
TRAINER_IMAGE=kerasjob/trainer:dev-cpu
# One host directory per PersistentVolume of hack/kind/shared-storage.yaml.
PV_COUNT="$(grep -c '^kind: PersistentVolume$' hack/kind/shared-storage.yaml)"

# --- prerequisites, each with the way out -------------------------------------------------
command -v docker >/dev/null \
  || die "docker not found. kind runs Kubernetes nodes as Docker containers: install Docker (https://docs.docker.com/get-docker/). Without Docker, 'make test-e2e' runs the same suite on the local control plane."
docker info >/dev/null 2>&1 \
  || die "docker is installed but its daemon is not reachable ('docker info' failed): start Docker, or check permissions on /var/run/docker.sock."
command -v kind >/dev/null \
  || die "kind not found: install it (https://kind.sigs.k8s.io/docs/user/quick-start/#installation, e.g. 'go install sigs.k8s.io/kind@latest')."

# Prefer the pinned kubectl/helm from `make binaries`; fall back to PATH.
BIN_DIR="$(hack/cluster/build.sh --bin-dir 2>/dev/null || true)"
if [ -n "$BIN_DIR" ] && [ -x "$BIN_DIR/kubectl" ] && [ -x "$BIN_DIR/helm" ]; then
  export PATH="$BIN_DIR:$PATH"
fi
command -v kubectl >/dev/null || die "kubectl not found: run 'make binaries' or install kubectl."
command -v helm >/dev/null || die "helm not found: run 'make binaries' or install helm."
PYTEST="${PYTEST:-.venv/bin/pytest}"
[ -x "$PYTEST" ] || die "$PYTEST not found: run 'make venv' first."

# --- cluster ------------------------------------------------------------------------------
mkdir -p "$RUN_DIR"
export KUBECONFIG="$RUN_DIR/kubeconfig"   # never touch the user's ~/.kube/config

cleanup() {
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    log "failed (exit $rc); operator logs and cluster state follow"
    kubectl -n "$NAMESPACE" logs deployment/kerasjob-operator --tail=200 2>/dev/null || true
    kubectl get kerasjobs,pods,pvc -A -o wide 2>/dev/null || true
    kubectl describe kerasjob -n "$SMOKE_NS" 2>/dev/null | tail -40 || true
  fi
  if [ "${KEEP_CLUSTER:-0}" = 1 ]; then
    log "keeping cluster '$CLUSTER': export KUBECONFIG=$KUBECONFIG"
  else
    kind delete cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG" >/dev/null 2>&1 || true
  fi
  exit "$rc"
}
trap cleanup EXIT

# Every node bind-mounts the same host directory (see kind-config.yaml). One subdirectory
# per PersistentVolume, world-writable because the trainer runs as a non-root user and
# hostPath volumes get no fsGroup ownership change.
mkdir -p "$SHARED_DIR"
for i in $(seq 0 $((PV_COUNT - 1))); do mkdir -p "$SHARED_DIR/$(printf 'pv-%02d' "$i")"; done
chmod 1777 "$SHARED_DIR" "$SHARED_DIR"/pv-*
config="$RUN_DIR/kind-config.yaml"
sed "s#hostPath: /tmp/kerasjob-kind-shared#hostPath: $SHARED_DIR#" hack/kind/kind-config.yaml > "$config"

if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  log "cluster '$CLUSTER' exists; deleting it for a clean run"
  kind delete cluster --name "$CLUSTER"
fi
log "creating kind cluster '$CLUSTER' (1 control plane, 2 workers)"
kind create cluster --name "$CLUSTER" --config "$config" --kubeconfig "$KUBECONFIG" \
  ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 180s

# --- images -------------------------------------------------------------------------------
if [ "${SKIP_IMAGES:-0}" != 1 ]; then
  # The GPU trainer variant is of no use on kind and is several GB: build only the CPU one.
  make images IMAGE_VARIANTS=cpu
fi
log "loading $OPERATOR_IMAGE and $TRAINER_IMAGE into every node"
kind load docker-image --name "$CLUSTER" "$OPERATOR_IMAGE" "$TRAINER_IMAGE"

# --- ReadWriteMany checkpoint storage -----------------------------------------------------
log "creating StorageClass kerasjob-shared and its ReadWriteMany PersistentVolumes"
kubectl apply -f hack/kind/shared-storage.yaml

# --- the operator, as a user installs it --------------------------------------------------
# The chart's operator handles one namespace, where the examples run. The e2e suite below
# starts its own operator for its own t-* namespaces (as it does on any cluster), so the
# two never reconcile the same job.
log "installing the chart into $NAMESPACE (handling namespace $SMOKE_NS)"
kubectl create namespace "$SMOKE_NS"
helm install kerasjob-operator charts/kerasjob-operator \
  --namespace "$NAMESPACE" --create-namespace \
  --set image.tag=dev --set image.pullPolicy=Never \
  --set trainerImage.tag=dev --set trainerImage.variant=cpu \
  --set-json "watchNamespaces=[\"$SMOKE_NS\"]" \
  --wait --timeout 5m
kubectl -n "$NAMESPACE" rollout status deployment/kerasjob-operator --timeout=120s

# --- the examples, as a user runs them ----------------------------------------------------
# examples/mnist.yaml on its checkpoint claim (given kind's ReadWriteMany class), with one
# worker deleted mid-run: the job must still succeed, with the deletion counted as a
# disruption.
log "running examples/mnist.yaml in $SMOKE_NS"
sed 's|# storageClassName: standard-rwx|storageClassName: kerasjob-shared|' \
  examples/checkpoint-pvc.yaml | kubectl apply -n "$SMOKE_NS" -f -
kubectl apply -n "$SMOKE_NS" -f examples/mnist.yaml
kubectl wait -n "$SMOKE_NS" kerasjob/mnist --for=jsonpath='{.status.phase}'=Running --timeout=10m
# Right after Running, the trainers are still starting TensorFlow: the deletion lands well
# before the 300 steps are done.
log "deleting mnist-worker-1 (a disruption)"
kubectl delete pod -n "$SMOKE_NS" mnist-worker-1 --wait=false
kubectl wait -n "$SMOKE_NS" kerasjob/mnist --for=jsonpath='{.status.phase}'=Succeeded --timeout=20m
disruptions="$(kubectl get -n "$SMOKE_NS" kerasjob/mnist -o jsonpath='{.status.restarts.disruptions}')"
[ "${disruptions:-0}" -ge 1 ] || die "mnist succeeded but recorded ${disruptions:-no} disruptions"
log "examples/mnist.yaml succeeded through a disruption ($disruptions)"

# --- the suite ----------------------------------------------------------------------------
# The same tests as `make test-e2e`, pointed at $KUBECONFIG by "current". Jobs that need
# shared checkpoints can use the kerasjob-shared class; the default trainer image is the one
# loaded above.
log "running tests/e2e against kind"
# shellcheck disable=SC2086
KERASJOB_TEST_CLUSTER=current \
KERASJOB_TEST_STORAGE_CLASS=kerasjob-shared \
KERASJOB_DEFAULT_IMAGE="$TRAINER_IMAGE" \
  "$PYTEST" ${PYTEST_ARGS:-} tests/e2e
log "passed"
