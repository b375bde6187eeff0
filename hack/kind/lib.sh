# shellcheck shell=bash
# Shared by hack/kind/*.sh (sourced, not run): the cluster's pins (hack/cluster/lib.sh), the
# image tooling (hack/images/lib.sh) and the Docker daemon kind and the images use.

# shellcheck source=hack/images/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../images/lib.sh"
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../cluster/lib.sh"
KIND_DIR="$REPO_ROOT/hack/kind"

# use_docker_daemon: export DOCKER_HOST and DOCKER (a client that talks to it) for the daemon
# `make images` builds in (hack/images/README.md): DOCKER_HOST if set, else the one `docker
# info` reaches, else the private dockerd (hack/images/dockerd.sh start: needs root). kind,
# the node image and the project's images must live in the same daemon.
use_docker_daemon() {
  local out
  if [ -n "${DOCKER_HOST:-}" ]; then
    pick_client || die "the docker daemon at DOCKER_HOST=$DOCKER_HOST is not reachable"
  elif ! pick_client; then
    # A running private daemon is used as it is; starting one waits for a running build.
    out="$("$REPO_ROOT/hack/images/dockerd.sh" status 2>/dev/null)" \
      || out="$("$REPO_ROOT/hack/images/dockerd.sh" start)" || exit 1
    export DOCKER_HOST="${out#DOCKER_HOST=}"
    pick_client || die "the private dockerd at $DOCKER_HOST does not answer; see $PRIVATE_LOG"
    # Started before hack/images/runc-bounded.sh existed: `start` reloads its runtimes.
    if [ -n "$("$REPO_ROOT/hack/images/runc-bounded.sh" --missing)" ] \
        && [ "$("$DOCKER" info --format '{{.DefaultRuntime}}')" != runc-bounded ]; then
      "$REPO_ROOT/hack/images/dockerd.sh" start >/dev/null
    fi
  fi
}

# private_daemon: 0 when DOCKER talks to the private dockerd of hack/images/dockerd.sh.
private_daemon() {
  [ "$("$DOCKER" info --format '{{.DockerRootDir}}' 2>/dev/null)" = "$PRIVATE_DATA_ROOT" ]
}
