# shellcheck shell=bash disable=SC2034
# Shared by hack/images/*.sh (sourced, not run). See hack/images/README.md.
#
#   KERASJOB_CACHE   cache root (default ~/.cache/kerasjob): the private daemon's images, the
#                    base image's rootfs tarball. Never in git.
#   KERASJOB_RUN     runtime state (default <repo>/.run): the private daemon's socket, pid
#                    file, exec root and log, under $KERASJOB_RUN/docker/.
#   DOCKER           the docker client to use (default: the first `docker` on PATH that can
#                    talk to the daemon; Debian's 20.10 client and Docker's 28.x both work).

IMAGES_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
KERASJOB_CACHE="${KERASJOB_CACHE:-$HOME/.cache/kerasjob}"
KERASJOB_RUN="${KERASJOB_RUN:-$IMAGES_ROOT/.run}"
IMAGES_CACHE="$KERASJOB_CACHE/images"
# The private daemon: images persist in the cache, everything that lives only while the
# daemon runs is under KERASJOB_RUN.
PRIVATE_DATA_ROOT="$IMAGES_CACHE/docker"
PRIVATE_RUN_DIR="$KERASJOB_RUN/docker"
PRIVATE_SOCKET="$PRIVATE_RUN_DIR/docker.sock"
PRIVATE_PIDFILE="$PRIVATE_RUN_DIR/dockerd.pid"
PRIVATE_LOG="$PRIVATE_RUN_DIR/dockerd.log"

log() { printf '[images] %s\n' "$*" >&2; }
warn() { printf '[images] WARNING: %s\n' "$*" >&2; }
die() { printf '[images] error: %s\n' "$*" >&2; exit 1; }

# Every `docker` on PATH (or just $DOCKER), one per line, in PATH order.
docker_candidates() {
  if [ -n "${DOCKER:-}" ]; then
    printf '%s\n' "$DOCKER"
  else
    type -ap docker 2>/dev/null || true
  fi
}

# Set DOCKER to a client that can talk to the daemon at DOCKER_HOST (or the default one).
# Returns 1 when none can. A client too new or too old for the daemon fails `docker
# version`'s server part, so the next one is tried; one of the daemon's own version (Debian's
# 20.10 client for Debian's 20.10 daemon) is preferred, else the first that works.
pick_client() {
  local c versions first=""
  while IFS= read -r c; do
    [ -n "$c" ] || continue
    versions="$(timeout 20 "$c" version --format '{{.Client.Version}} {{.Server.Version}}' 2>/dev/null)" \
      || continue
    [ -n "$first" ] || first="$c"
    if [ "${versions% *}" = "${versions#* }" ]; then first="$c"; break; fi
  done < <(docker_candidates)
  [ -n "$first" ] || return 1
  DOCKER="$first"
  export DOCKER
}

# PID of a running dockerd whose --data-root is ours (started by any KERASJOB_RUN), if any.
private_dockerd_pid() {
  local p cmd
  for p in /proc/[0-9]*; do
    case "$(readlink "$p/exe" 2>/dev/null)" in */dockerd) ;; *) continue ;; esac
    cmd="$( { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null)" || continue
    case "$cmd" in
      *dockerd\ *--data-root\ "$PRIVATE_DATA_ROOT"\ *) echo "${p#/proc/}"; return 0 ;;
    esac
  done
  return 1
}

# The unix socket a running dockerd listens on (its -H unix://... argument).
dockerd_socket_of() {
  { tr '\0' '\n' <"/proc/$1/cmdline"; } 2>/dev/null | sed -n 's|^unix://||p' | sed -n 1p
}
