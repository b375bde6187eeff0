#!/usr/bin/env bash
# Build the container images: kerasjob/operator:dev, kerasjob/trainer:dev-<variant> and the
# example images (examples/<name>/Dockerfile -> kerasjob.local/<name>:dev, FROM the cpu trainer).
# `make images` runs this; so can tests
# and the demo (idempotent; seconds when nothing changed). See hack/images/README.md.
#
#   hack/images/build.sh [--export DIR] [--stop] [--quiet]
#
#   --export DIR   also `docker save` each image to DIR/<name>.tar (operator.tar,
#                  trainer-cpu.tar, tfjob-mnist.tar, ...) for `ctr -n k8s.io images import`;
#                  a tarball is rewritten only when its image changed (DIR/<name>.tar.id)
#   --stop         stop the private dockerd afterwards if this build started it (images stay
#                  in its data root); one that ran before, or runs containers (a kind
#                  cluster of hack/kind/e2e.sh), is left running
#   --quiet        build output to $KERASJOB_RUN/images/*.log instead of the terminal
#
# Environment (all optional):
#   IMAGE_VARIANTS        trainer variants, "cpu" (default), "cpu gpu", "cpu jax-cpu"
#                         (jax-*: the Keras 3 image, trainer_image/keras3.Dockerfile)
#   IMAGE_TAG             tag of the project's images (default dev)
#   KERASJOB_EXAMPLE_IMAGES  0: not the example images (default 1: built when cpu is)
#   KERASJOB_LOCAL_BASE   auto (default): build FROM the official python image when the
#                         daemon has it or can pull it, else FROM the local base
#                         (hack/images/base.sh); 1: always the local base; 0: never
#   TRAINER_GPU_BASE      base of the gpu variant; unset (default): the same Python base as
#                         cpu, with tensorflow[and-cuda] from PyPI (CUDA, cuDNN, NCCL as
#                         nvidia-* wheels); set, e.g. tensorflow/tensorflow:<TF>-gpu: that
#                         image and its TensorFlow (pulled if needed; fails if it cannot be)
#   DOCKER, DOCKER_HOST   client and daemon; default: the daemon `docker info` reaches,
#                         else a private dockerd (hack/images/dockerd.sh)
#
# Prints a summary (time, images and sizes) on stdout; progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=hack/images/lib.sh
source hack/images/lib.sh

# First, with nothing but bash: is there a docker client at all?
if [ -n "${DOCKER:-}" ]; then
  command -v "$DOCKER" >/dev/null || die "docker not found (DOCKER=$DOCKER); install Docker (https://docs.docker.com/get-docker/; Debian: apt-get install docker.io)"
elif [ -z "$(docker_candidates)" ]; then
  die "docker not found; install Docker (https://docs.docker.com/get-docker/; Debian: apt-get install docker.io) to build images"
fi

export_dir="" stop_after=0 quiet=0
while [ $# -gt 0 ]; do
  case "$1" in
    --export) [ $# -ge 2 ] || die "--export needs a directory"; export_dir="$2"; shift 2 ;;
    --export=*) export_dir="${1#--export=}"; shift ;;
    --stop) stop_after=1; shift ;;
    --quiet|-q) quiet=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see $0 --help)" ;;
  esac
done

IMAGE_VARIANTS="${IMAGE_VARIANTS:-cpu}"
IMAGE_TAG="${IMAGE_TAG:-dev}"
KERASJOB_LOCAL_BASE="${KERASJOB_LOCAL_BASE:-auto}"
# The images' names: contract/kerasjob_contract/images.py (one place for every name).
names=contract/kerasjob_contract/images.py
OPERATOR_IMAGE="$(sed -n 's/^OPERATOR_REPOSITORY = "\(.*\)"$/\1/p' "$names"):$IMAGE_TAG"
TRAINER_REPO="$(sed -n 's/^TRAINER_REPOSITORY = "\(.*\)"$/\1/p' "$names")"
[ "$OPERATOR_IMAGE" != ":$IMAGE_TAG" ] && [ -n "$TRAINER_REPO" ] || die "could not read the image names from $names"
LOCAL_PYTHON=kerasjob.local/python:3.11-bookworm
# The official bases, as the Dockerfiles name them.
OFFICIAL_PYTHON="$(sed -n 's/^ARG PYTHON_IMAGE=//p' Dockerfile)"
TF_VERSION="$(sed -n 's/^ARG TF_VERSION=//p' trainer_image/Dockerfile)"
TRAINER_GPU_BASE="${TRAINER_GPU_BASE:-}"
[ -n "$OFFICIAL_PYTHON" ] && [ -n "$TF_VERSION" ] || die "could not read PYTHON_IMAGE/TF_VERSION from the Dockerfiles"
for v in $IMAGE_VARIANTS; do
  case "$v" in cpu|gpu|jax-cpu|jax-gpu) ;;
    *) die "IMAGE_VARIANTS: unknown variant '$v' (cpu, gpu, jax-cpu, jax-gpu)" ;; esac
done

mkdir -p "$IMAGES_CACHE" "$KERASJOB_RUN/images"
# One build at a time per cache (tests and the demo may call this concurrently).
exec 9>"$IMAGES_CACHE/.build.lock"
flock 9

start=$SECONDS

# --- the daemon and a client that talks to it ---------------------------------------------
daemon_desc="" started_here=0
if [ -n "${DOCKER_HOST:-}" ]; then
  pick_client || die "the docker daemon at DOCKER_HOST=$DOCKER_HOST is not reachable"
elif ! pick_client; then
  log "no docker daemon reachable ('docker info' failed); using a private dockerd"
  # --stop stops only a daemon this build started: one that ran before may serve someone
  # else (another checkout's build, a kind cluster's nodes).
  KERASJOB_IMAGES_LOCKED=1 hack/images/dockerd.sh status >/dev/null 2>&1 || started_here=1
  out="$(KERASJOB_IMAGES_LOCKED=1 hack/images/dockerd.sh start)" || exit 1
  export DOCKER_HOST="${out#DOCKER_HOST=}"
  pick_client || die "the private dockerd at $DOCKER_HOST does not answer; see $PRIVATE_LOG"
fi
root_dir="$("$DOCKER" info --format '{{.DockerRootDir}}' 2>/dev/null || true)"
server_version="$("$DOCKER" version --format '{{.Server.Version}}')"
private=0
if [ "$root_dir" = "$PRIVATE_DATA_ROOT" ]; then
  private=1
  daemon_desc="private dockerd $server_version at $DOCKER_HOST (hack/images/dockerd.sh)"
  # No bridge on the private daemon: build steps use the host's network. BuildKit of a
  # 20.10 daemon wants a bridge for its own setup; the classic builder does not.
  IMAGES_NETWORK="${IMAGES_NETWORK:-host}"
  export DOCKER_BUILDKIT="${DOCKER_BUILDKIT:-0}"
else
  daemon_desc="dockerd $server_version at ${DOCKER_HOST:-the default socket}"
fi
net_args=()
[ -z "${IMAGES_NETWORK:-}" ] || net_args=(--network "$IMAGES_NETWORK")
log "daemon: $daemon_desc; client: $DOCKER"

# --- bases --------------------------------------------------------------------------------
daemon_id="$("$DOCKER" info --format '{{.ID}}' 2>/dev/null | tr -c 'A-Za-z0-9\n' '_' || true)"
unreachable_stamp="$IMAGES_CACHE/registry-unreachable-${daemon_id:-unknown}"
# True if the daemon has IMAGE or can pull it. A failed pull is remembered for a day (per
# daemon) so that repeated builds on a machine without a registry do not wait for it.
have_or_pull() {
  local image="$1" err
  "$DOCKER" image inspect "$image" >/dev/null 2>&1 && return 0
  if [ -n "$(find "$unreachable_stamp" -mmin -1440 2>/dev/null)" ] && [ "${2:-}" != force ]; then
    return 1
  fi
  log "pulling $image"
  if err="$(timeout 900 "$DOCKER" pull -q "$image" 2>&1)"; then
    rm -f "$unreachable_stamp"
    return 0
  fi
  log "cannot pull $image: $(printf '%s' "$err" | tail -n1)"
  touch "$unreachable_stamp"
  return 1
}

case "$KERASJOB_LOCAL_BASE" in
  1) use_local=1 ;;
  0) have_or_pull "$OFFICIAL_PYTHON" force || die "KERASJOB_LOCAL_BASE=0 but $OFFICIAL_PYTHON cannot be pulled"
     use_local=0 ;;
  auto)
    if have_or_pull "$OFFICIAL_PYTHON"; then use_local=0; else
      log "$OFFICIAL_PYTHON is not available; building FROM the local base $LOCAL_PYTHON"
      use_local=1
    fi ;;
  *) die "KERASJOB_LOCAL_BASE must be auto, 1 or 0, not '$KERASJOB_LOCAL_BASE'" ;;
esac
if [ "$use_local" = 1 ]; then
  DOCKER="$DOCKER" hack/images/base.sh
  python_base="$LOCAL_PYTHON"
else
  python_base="$OFFICIAL_PYTHON"
fi

# --- builds -------------------------------------------------------------------------------
declare -a summary=()
declare -A built_secs=()
built=()
docker_build() {  # TAG LOGNAME ARGS...
  local tag="$1" name="$2" t0=$SECONDS old_id new_id
  shift 2
  old_id="$("$DOCKER" image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)"
  log "building $tag"
  if [ "$quiet" = 1 ]; then
    local logf="$KERASJOB_RUN/images/$name.log"
    "$DOCKER" build "${net_args[@]}" -t "$tag" "$@" >"$logf" 2>&1 \
      || { tail -n 30 "$logf" >&2; die "building $tag failed; see $logf"; }
  else
    "$DOCKER" build "${net_args[@]}" -t "$tag" "$@" >&2 || die "building $tag failed"
  fi
  # On the private daemon, remove the image this build superseded (and its parent layers
  # that no other image uses), or old TensorFlow layers pile up in the cache. Not `docker
  # image prune`: the classic builder's cache of a multi-stage build's first stage is
  # dangling images. A daemon that is not ours is left alone.
  new_id="$("$DOCKER" image inspect -f '{{.Id}}' "$tag")"
  if [ "$private" = 1 ] && [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then
    "$DOCKER" rmi "$old_id" >/dev/null 2>&1 || true
  fi
  built_secs[$tag]=$((SECONDS - t0))
  built+=("$tag")
}

docker_build "$OPERATOR_IMAGE" operator -f Dockerfile --build-arg "PYTHON_IMAGE=$python_base" .

for v in $IMAGE_VARIANTS; do
  tag="$TRAINER_REPO:$IMAGE_TAG-$v"
  if [ "${v#jax-}" != "$v" ]; then  # Keras 3 on JAX: its own Dockerfile, no TensorFlow
    docker_build "$tag" "trainer-$v" -f trainer_image/keras3.Dockerfile \
      --build-arg "VARIANT=$v" --build-arg "BASE_IMAGE=$python_base" .
    continue
  fi
  base="$python_base"
  if [ "$v" = gpu ] && [ -n "$TRAINER_GPU_BASE" ]; then  # the official TensorFlow GPU image
    base="$TRAINER_GPU_BASE"
    have_or_pull "$base" force \
      || die "TRAINER_GPU_BASE=$base is not available to the daemon (pull or docker load it)," \
        "or unset TRAINER_GPU_BASE to build the gpu variant from PyPI's tensorflow[and-cuda]"
  fi
  docker_build "$tag" "trainer-$v" -f trainer_image/Dockerfile \
    --build-arg "VARIANT=$v" --build-arg "BASE_IMAGE=$base" .
done

# --- example images -----------------------------------------------------------------------
# examples/<name>/Dockerfile: a user's own image (e.g. examples/tfjob-mnist, the stand-in for
# Kubeflow's TFJob example image), as kerasjob.local/<name>:$IMAGE_TAG, FROM the cpu trainer
# image built above (its TensorFlow: no second download). Seconds when nothing changed.
# KERASJOB_EXAMPLE_IMAGES=0 skips them (the demo, which runs none of them).
cpu_trainer="$TRAINER_REPO:$IMAGE_TAG-cpu"
for dockerfile in examples/*/Dockerfile; do
  [ -f "$dockerfile" ] && [ "${KERASJOB_EXAMPLE_IMAGES:-1}" != 0 ] || continue
  dir="$(dirname "$dockerfile")"
  tag="kerasjob.local/$(basename "$dir"):$IMAGE_TAG"
  if [ -z "${built_secs[$cpu_trainer]:-}" ]; then
    summary+=("$(printf '  %-34s SKIPPED (needs %s: IMAGE_VARIANTS without cpu)' "$tag" "$cpu_trainer")")
    continue
  fi
  docker_build "$tag" "example-$(basename "$dir")" -f "$dockerfile" \
    --build-arg "BASE_IMAGE=$cpu_trainer" "$dir"
done

# --- export -------------------------------------------------------------------------------
export_name() {  # kerasjob/trainer:dev-cpu -> trainer-cpu
  local n="${1##*/}"
  n="${n/:$IMAGE_TAG-/-}"
  echo "${n%:"$IMAGE_TAG"}"
}
if [ -n "$export_dir" ]; then
  mkdir -p "$export_dir"
  for tag in "${built[@]}"; do
    f="$export_dir/$(export_name "$tag").tar"
    id="$("$DOCKER" image inspect -f '{{.Id}}' "$tag")"
    if [ -s "$f" ] && [ "$(cat "$f.id" 2>/dev/null)" = "$id" ]; then
      log "$f is current"
      continue
    fi
    log "saving $tag to $f"
    "$DOCKER" save -o "$f.tmp" "$tag"
    chmod 0644 "$f.tmp"
    mv "$f.tmp" "$f"
    echo "$id" >"$f.id"
  done
fi

# --- summary ------------------------------------------------------------------------------
human() { awk -v b="$1" 'BEGIN { if (b >= 1e9) printf "%.2f GB", b / 1e9; else printf "%.1f MB", b / 1e6 }'; }
echo "images: built in $((SECONDS - start)) s on $daemon_desc; python base $python_base"
for tag in "${built[@]}"; do
  printf '  %-34s %10s  (%s s)\n' "$tag" "$(human "$("$DOCKER" image inspect -f '{{.Size}}' "$tag")")" "${built_secs[$tag]}"
done
for line in "${summary[@]}"; do echo "$line"; done
[ -z "$export_dir" ] || echo "  exported to $export_dir (ctr -n k8s.io images import <file>.tar)"
if [ "$private" = 1 ]; then
  running="$("$DOCKER" ps -q | wc -l)"
  if [ "$stop_after" = 1 ] && [ "$running" -gt 0 ]; then
    # Not under containers someone runs on it (a kind cluster of hack/kind/e2e.sh).
    echo "  private dockerd left running: $running containers run on it; stop it: hack/images/dockerd.sh stop"
  elif [ "$stop_after" = 1 ] && [ "$started_here" = 1 ]; then
    KERASJOB_IMAGES_LOCKED=1 hack/images/dockerd.sh stop
    echo "  private dockerd stopped; restart: hack/images/dockerd.sh start"
  elif [ "$stop_after" = 1 ]; then
    echo "  private dockerd left running: it ran before this build"
  else
    echo "  use it: export DOCKER_HOST=$DOCKER_HOST; stop it: hack/images/dockerd.sh stop"
  fi
fi
