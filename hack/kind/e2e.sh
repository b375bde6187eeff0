#!/usr/bin/env bash
# End-to-end tests on kind: create a 3-node kind cluster, build and load the dev images,
# give it ReadWriteMany checkpoint storage, install the Helm chart, train examples/mnist.yaml
# through a worker deletion under the installed operator, run the e2e suite against the
# cluster (KERASJOB_TEST_CLUSTER=current), delete the cluster and check that nothing is left
# (containers, volumes, the Docker network, iptables rules, mounts). Entry point:
# `make kind-e2e`. See hack/kind/README.md.
#
# Needs: a Docker daemon (or root and Debian's docker.io for the private one of `make
# images`), Go (kind, kubeadm and the Kubernetes binaries are built from the Go module proxy
# into the binary cache), `make venv`.
#
# Environment (all optional):
#   KIND_CLUSTER_NAME   cluster name, also its Docker network's      (default kerasjob-e2e)
#   KIND_NODE_IMAGE     auto (default): kind's own kindest/node when the daemon has it or can
#                       pull it, else the local one; local: the image of
#                       hack/kind/node-image.sh (built here, no registry); or any image
#   KIND_SHARED_DIR     host directory shared by all nodes    (default /tmp/<cluster>-shared)
#   KIND                the kind binary                       (default: hack/kind/build.sh's)
#   KEEP_CLUSTER=1      keep the cluster afterwards (KUBECONFIG is printed)
#   SKIP_IMAGES=1       do not rebuild the images (their archives must exist in
#                       IMAGES_EXPORT_DIR, default $KERASJOB_CACHE/images/export)
#   PYTEST_ARGS         extra pytest arguments, e.g. "-k mnist -x"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# The first checks need nothing but bash (hack/kind/lib.sh, hack/images/lib.sh).
# shellcheck source=hack/kind/lib.sh
source hack/kind/lib.sh
die() { echo "kind-e2e: $*" >&2; exit 1; }
log() { echo "kind-e2e: $(date +%T) $*" >&2; }
[ -n "$(docker_candidates)" ] \
  || die "docker not found. kind runs Kubernetes nodes as Docker containers: install Docker (https://docs.docker.com/get-docker/; Debian: apt-get install docker.io). Without Docker, 'make test-e2e' runs the same suite on the local cluster."
[ -z "${KIND:-}" ] || [ -x "$KIND" ] \
  || die "kind not found at KIND=$KIND: install kind, or unset KIND to build the pinned one (hack/kind/build.sh)"
PYTHON="${PYTHON:-.venv/bin/python}"
[ -x "$PYTHON" ] || die "$PYTHON not found: run 'make venv' first"
use_docker_daemon
# shellcheck source=hack/cluster/lib.sh
source hack/cluster/lib.sh   # the pins, bin_dir, go_module_dir
die() { echo "kind-e2e: $*" >&2; exit 1; }
log() { echo "kind-e2e: $(date +%T) $*" >&2; }

CLUSTER="${KIND_CLUSTER_NAME:-kerasjob-e2e}"
[[ "$CLUSTER" =~ ^[a-z0-9][a-z0-9-]{0,30}$ ]] \
  || die "KIND_CLUSTER_NAME must be lower-case letters, digits and '-' (at most 31), not '$CLUSTER'"
SHARED_DIR="${KIND_SHARED_DIR:-/tmp/$CLUSTER-shared}"
RUN_DIR="$KERASJOB_RUN/kind/$CLUSTER"
NAMESPACE=kerasjob-system
SMOKE_NS=kerasjob-examples
OPERATOR_IMAGE=kerasjob/operator:dev
TRAINER_IMAGE=kerasjob/trainer:dev-cpu
JAX_TRAINER_IMAGE=kerasjob/trainer:dev-jax-cpu   # examples/keras3-jax.yaml (tests/e2e)
# One host directory per PersistentVolume of hack/kind/shared-storage.yaml.
PV_COUNT="$(grep -c '^kind: PersistentVolume$' hack/kind/shared-storage.yaml)"
# kind's label on its node containers.
KIND_LABEL=io.x-k8s.kind.cluster
RULE_TAG="kerasjob-kind-$CLUSTER"
T0=$SECONDS

# --- the binaries ---------------------------------------------------------------------------
hack/cluster/build.sh >&2   # kubectl, helm (and the node image's binaries)
if [ -z "${KIND:-}" ]; then
  hack/kind/build.sh >&2
  KIND="$(hack/kind/build.sh --bin kind)"
fi
# kind runs `docker`: the client that talks to this daemon, first on PATH, with our kubectl/helm.
mkdir -p "$RUN_DIR/bin"
ln -sfn "$(command -v "$DOCKER")" "$RUN_DIR/bin/docker"
PATH="$RUN_DIR/bin:$(bin_dir):$PATH"
export PATH
export KUBECONFIG="$RUN_DIR/kubeconfig"   # never touch the user's ~/.kube/config
# kind puts its nodes on this network (made and removed here, not kind's shared "kind").
export KIND_EXPERIMENTAL_DOCKER_NETWORK="$CLUSTER"

# --- coexistence: one run per cluster name; the host's firewall policy --------------------
exec 8>"$KERASJOB_CACHE/kind-e2e-$CLUSTER.lock"
flock -n 8 || die "another 'make kind-e2e' runs cluster '$CLUSTER' on this machine: wait for it, or set KIND_CLUSTER_NAME"
if grep -qx "$CLUSTER" <<<"$("$KIND" get clusters 2>/dev/null || true)"; then
  die "a kind cluster '$CLUSTER' exists (a run that was killed?): '$KIND delete cluster --name $CLUSTER', or set KIND_CLUSTER_NAME"
fi
if "$DOCKER" network inspect "$CLUSTER" >/dev/null 2>&1; then
  [ -z "$("$DOCKER" network inspect -f '{{range .Containers}}{{.Name}} {{end}}' "$CLUSTER")" ] \
    || die "Docker network '$CLUSTER' has containers that are not a kind cluster's; set KIND_CLUSTER_NAME"
  "$DOCKER" network rm "$CLUSTER" >/dev/null
fi

# --- the node image -----------------------------------------------------------------------
node_image="${KIND_NODE_IMAGE:-auto}"
if [ "$node_image" = auto ]; then
  kind_default="$(grep -ho 'kindest/node:v[^"]*' "$(go_module_dir "$KIND_DIR/gomod/kind" sigs.k8s.io/kind)/pkg/apis/config/defaults/image.go" | sed -n 1p)"
  if [ -n "$kind_default" ] && { "$DOCKER" image inspect "$kind_default" >/dev/null 2>&1 \
      || timeout 300 "$DOCKER" pull -q "$kind_default" >/dev/null 2>&1; }; then
    node_image="$kind_default"
  else
    log "kind's node image ${kind_default:-?} cannot be pulled: building the local one (hack/kind/node-image.sh)"
    node_image=local
  fi
fi
[ "$node_image" != local ] || node_image="$(hack/kind/node-image.sh)"
labels="$("$DOCKER" image inspect -f '{{json .Config.Labels}}' "$node_image" 2>/dev/null || true)"
log "node image $node_image ($((SECONDS - T0)) s)"

# --- cleanup: delete the cluster, then check that nothing of it is left ------------------
modules_made=0
[ -e /lib/modules ] || modules_made=1   # kind bind-mounts it; Docker creates a missing source
forward_rule=()
leftovers() {
  local bridge="br-$1" left=()
  [ -z "$("$DOCKER" ps -aq --filter "label=$KIND_LABEL=$CLUSTER")" ] || left+=("containers")
  ! "$DOCKER" network inspect "$CLUSTER" >/dev/null 2>&1 || left+=("network $CLUSTER")
  [ -z "${1:-}" ] || ! ip link show "$bridge" >/dev/null 2>&1 || left+=("bridge $bridge")
  ! grep -q -- "$RULE_TAG" <<<"$(iptables -w -S 2>/dev/null || true)" || left+=("iptables rule $RULE_TAG")
  [ -z "${1:-}" ] || ! grep -q -- "$bridge" <<<"$(iptables-save 2>/dev/null || true)" || left+=("iptables rules on $bridge")
  [ -z "$(awk -v d="$SHARED_DIR" 'index($2, d) == 1' /proc/self/mounts)" ] || left+=("mounts under $SHARED_DIR")
  [ ! -e "$SHARED_DIR" ] || left+=("$SHARED_DIR")
  [ "$modules_made" = 0 ] || [ ! -e /lib/modules ] || left+=("/lib/modules (made for kind's bind mount)")
  local new
  new="$(comm -13 <(echo "$MOUNTS_BEFORE") <(daemon_mounts) | tr '\n' ' ')"
  [ -z "${new// /}" ] || left+=("mounts: $new")
  [ ${#left[@]} -eq 0 ] || echo "${left[*]}"
}
# Mount points of the daemon's containers on the host: their root file systems under its
# data root, their network namespaces (<exec root>/netns).
DOCKER_ROOT="$("$DOCKER" info --format '{{.DockerRootDir}}')"
daemon_mounts() {
  awk -v r="$DOCKER_ROOT/" 'index($2, r) == 1 || $2 ~ /\/netns\/[0-9a-f]+$/ {print $2}' /proc/self/mounts | sort
}
MOUNTS_BEFORE="$(daemon_mounts)"
NET_ID=""
VOLUMES_BEFORE="$("$DOCKER" volume ls -q | sort)"
cleanup() {
  local rc=$? left
  if [ "$rc" -ne 0 ]; then
    log "failed (exit $rc); operator logs and cluster state follow"
    kubectl -n "$NAMESPACE" logs deployment/kerasjob-operator --tail=200 2>/dev/null || true
    kubectl get nodes,kerasjobs,pods,pvc -A -o wide 2>/dev/null || true
    kubectl describe kerasjob -n "$SMOKE_NS" 2>/dev/null | tail -40 || true
    # Last: what the example's trainers said (a CI log keeps the end of a long output).
    local pod
    for pod in $(kubectl get pods -n "$SMOKE_NS" -o name 2>/dev/null); do
      log "the last lines of $pod (every incarnation)"
      kubectl logs -n "$SMOKE_NS" "$pod" --all-containers --tail=25 2>&1 | cut -c1-300 || true
    done
  fi
  if [ "${KEEP_CLUSTER:-0}" = 1 ]; then
    log "keeping cluster '$CLUSTER': export KUBECONFIG=$KUBECONFIG PATH=$RUN_DIR/bin:\$PATH"
    exit "$rc"
  fi
  "$KIND" delete cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG" >/dev/null 2>&1 || true
  "$DOCKER" network rm "$CLUSTER" >/dev/null 2>&1 || true
  [ ${#forward_rule[@]} -eq 0 ] || iptables -w -D "${forward_rule[@]}" 2>/dev/null || true
  [ "$modules_made" = 0 ] || rmdir /lib/modules 2>/dev/null || true
  rm -rf "$SHARED_DIR" "$RUN_DIR"
  left="$(leftovers "${NET_ID:0:12}")"
  # A build of someone else's may be mounting a container just now: look twice.
  [ -z "$left" ] || { sleep 5; left="$(leftovers "${NET_ID:0:12}")"; }
  if [ "$("$DOCKER" volume ls -q | sort)" != "$VOLUMES_BEFORE" ]; then
    left="${left:+$left, }Docker volumes: $(comm -13 <(echo "$VOLUMES_BEFORE") <("$DOCKER" volume ls -q | sort) | tr '\n' ' ')"
  fi
  if [ -n "$left" ]; then
    log "LEFT BEHIND after deleting the cluster: $left"
    [ "$rc" -ne 0 ] || rc=1
  else
    log "cluster '$CLUSTER' deleted; nothing left behind (containers, volumes, network, iptables, mounts)"
  fi
  log "wall time $((SECONDS - T0)) s"
  exit "$rc"
}
trap cleanup EXIT

# --- network and cluster ------------------------------------------------------------------
NET_ID="$("$DOCKER" network create -d bridge "$CLUSTER")"
bridge="br-${NET_ID:0:12}"
# Nodes talk across the bridge; bridged traffic crosses the host's FORWARD chain
# (br_netfilter), which a Docker with iptables on this host sets to DROP.
if [ "$(iptables -w -S FORWARD 2>/dev/null | sed -n 1p)" != "-P FORWARD ACCEPT" ]; then
  forward_rule=(FORWARD -i "$bridge" -o "$bridge" -m comment --comment "$RULE_TAG" -j ACCEPT)
  iptables -w -I "${forward_rule[@]}"
fi

# Every node bind-mounts the same host directory (see kind-config.yaml). One subdirectory
# per PersistentVolume, world-writable because the trainer runs as a non-root user and
# hostPath volumes get no fsGroup ownership change.
mkdir -p "$SHARED_DIR"
for i in $(seq 0 $((PV_COUNT - 1))); do mkdir -p "$SHARED_DIR/$(printf 'pv-%02d' "$i")"; done
chmod 1777 "$SHARED_DIR" "$SHARED_DIR"/pv-*
config="$RUN_DIR/kind-config.yaml"
PYTHONPATH="$PWD/dev${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m kerasjob_dev.kindconfig \
  --base hack/kind/kind-config.yaml --shared-dir "$SHARED_DIR" --image-labels "$labels" >"$config"

log "creating kind cluster '$CLUSTER' (1 control plane, 2 workers) with $node_image"
"$KIND" create cluster --name "$CLUSTER" --config "$config" --kubeconfig "$KUBECONFIG" \
  --image "$node_image" --wait 300s
if private_daemon; then
  # The private daemon publishes no ports (no iptables, no userland proxy): talk to the API
  # server at the control plane's address on the bridge (in its certificate).
  cp_ip="$("$DOCKER" inspect -f "{{(index .NetworkSettings.Networks \"$CLUSTER\").IPAddress}}" "$CLUSTER-control-plane")"
  kubectl config set-cluster "kind-$CLUSTER" --server="https://$cp_ip:6443" >/dev/null
fi
kubectl wait --for=condition=Ready nodes --all --timeout=300s
log "cluster up ($((SECONDS - T0)) s)"

# --- images -------------------------------------------------------------------------------
# The archives `make images-export` writes (and the local e2e tests use): saved only when an
# image changed, so a run after `make test` loads them without saving anything.
EXPORT_DIR="${IMAGES_EXPORT_DIR:-$KERASJOB_CACHE/images/export}"
if [ "${SKIP_IMAGES:-0}" != 1 ]; then
  # The GPU trainer variants are of no use on kind and are several GB: only the CPU ones.
  make images-export IMAGE_VARIANTS="cpu jax-cpu" IMAGES_EXPORT_DIR="$EXPORT_DIR"
fi
# Into the workers only: the control plane is tainted against workloads.
workers="$("$KIND" get nodes --name "$CLUSTER" | grep -v -- '-control-plane$' | paste -sd, -)"
log "loading $OPERATOR_IMAGE, $TRAINER_IMAGE and $JAX_TRAINER_IMAGE into $workers"
for archive in operator trainer-cpu trainer-jax-cpu; do
  [ -s "$EXPORT_DIR/$archive.tar" ] || die "$EXPORT_DIR/$archive.tar is missing: run without SKIP_IMAGES=1"
  "$KIND" load image-archive --name "$CLUSTER" --nodes "$workers" "$EXPORT_DIR/$archive.tar"
done
log "images loaded ($((SECONDS - T0)) s)"

# --- ReadWriteMany checkpoint storage -----------------------------------------------------
log "creating StorageClass kerasjob-shared and its ReadWriteMany PersistentVolumes"
kubectl apply -f hack/kind/shared-storage.yaml

# --- the operator, as a user installs it --------------------------------------------------
# The chart's operator handles one namespace, where the examples run. The e2e suite below
# starts its own operator for its own namespaces (as it does on any cluster), so the two
# never reconcile the same job.
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
log "examples/mnist.yaml succeeded through a disruption ($disruptions) ($((SECONDS - T0)) s)"

# --- the suite ----------------------------------------------------------------------------
# The same tests as `make test-e2e`, pointed at $KUBECONFIG by "current". Jobs that need
# shared checkpoints use the kerasjob-shared class; the default trainer image is the one
# loaded above.
log "running tests/e2e against kind"
# shellcheck disable=SC2086
KERASJOB_TEST_CLUSTER=current \
KERASJOB_TEST_STORAGE_CLASS=kerasjob-shared \
KERASJOB_DEFAULT_IMAGE="$TRAINER_IMAGE" \
  "$PYTHON" -m pytest -p no:cacheprovider ${PYTEST_ARGS:-} tests/e2e
log "passed ($((SECONDS - T0)) s)"
