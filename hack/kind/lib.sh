# shellcheck shell=bash disable=SC2034  # sourced: the scripts that source it use these variables
# Shared by hack/kind/*.sh (sourced, not run): the Docker daemon kind and the images use. Bash
# only when sourced (e2e.sh checks its prerequisites with it before anything else runs);
# the cluster's pins are hack/cluster/lib.sh, sourced by the scripts that need them.

# shellcheck source=hack/images/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../images/lib.sh"
KIND_DIR="$IMAGES_ROOT/hack/kind"

# use_docker_daemon: export DOCKER_HOST and DOCKER (a client that talks to it) for the daemon
# `make images` builds in (hack/images/README.md): DOCKER_HOST if set, else the one `docker
# info` reaches, else the private dockerd (hack/images/dockerd.sh: a running one as it is,
# else started, which needs root and Debian's docker.io). kind, the node image and the
# project's images must live in the same daemon.
use_docker_daemon() {
  local out
  if [ -n "${DOCKER_HOST:-}" ]; then
    pick_client || die "the docker daemon at DOCKER_HOST=$DOCKER_HOST is not reachable"
    return 0
  fi
  pick_client && return 0
  if out="$("$IMAGES_ROOT/hack/images/dockerd.sh" status 2>/dev/null)"; then
    export DOCKER_HOST="${out#DOCKER_HOST=}"
    pick_client || die "the private docker daemon at $DOCKER_HOST is not reachable ('docker version' failed): hack/images/dockerd.sh stop && hack/images/dockerd.sh start"
    # Started before hack/images/runc-bounded.sh existed: `start` reloads its runtimes.
    if [ -n "$("$IMAGES_ROOT/hack/images/runc-bounded.sh" --missing)" ] \
        && [ "$("$DOCKER" info --format '{{.DefaultRuntime}}')" != runc-bounded ]; then
      "$IMAGES_ROOT/hack/images/dockerd.sh" start >/dev/null
    fi
    return 0
  fi
  { [ "$(id -u 2>/dev/null)" = 0 ] && command -v dockerd >/dev/null; } \
    || die "the docker daemon is not reachable ('docker info' failed): start Docker, or check permissions on /var/run/docker.sock (as root with Debian's docker.io installed, a private daemon is started instead)"
  out="$("$IMAGES_ROOT/hack/images/dockerd.sh" start)" || exit 1
  export DOCKER_HOST="${out#DOCKER_HOST=}"
  pick_client || die "the private dockerd at $DOCKER_HOST does not answer; see $PRIVATE_LOG"
}

# private_daemon: 0 when DOCKER talks to the private dockerd of hack/images/dockerd.sh.
private_daemon() {
  [ "$("$DOCKER" info --format '{{.DockerRootDir}}' 2>/dev/null)" = "$PRIVATE_DATA_ROOT" ]
}
