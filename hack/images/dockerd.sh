#!/usr/bin/env bash
# A private Docker daemon for building the images on machines without a running one
# (see hack/images/README.md). Needs root and Debian's docker.io (dockerd, containerd, runc).
#
#   hack/images/dockerd.sh start    start it (no-op if it runs); prints DOCKER_HOST=...
#   hack/images/dockerd.sh stop     stop it; no process or mount is left behind
#   hack/images/dockerd.sh status   exit 0 and print DOCKER_HOST=... if it runs
#   eval "$(hack/images/dockerd.sh env)"   export DOCKER_HOST for the private daemon
#
# Images live in ${KERASJOB_CACHE:-~/.cache/kerasjob}/images/docker (they survive stop and
# restart); socket, pid file, exec root and log in ${KERASJOB_RUN:-<repo>/.run}/docker/.
# One daemon per data root: `start` finds a running one by its --data-root, whichever
# KERASJOB_RUN started it, and `stop` stops that one.
#
# No networking of its own: --iptables=false --ip-forward=false --bridge=none. A dockerd
# with iptables sets the FORWARD policy to DROP, which breaks the local node's Pod network;
# without a bridge, containers have no network unless run with --network host (the builds
# do) or --network none.
#
# start and stop wait for a running hack/images/build.sh (its lock), so that neither pulls
# the daemon from under a build; build.sh itself calls them with KERASJOB_IMAGES_LOCKED=1.
set -euo pipefail
# shellcheck source=hack/images/lib.sh
source "$(dirname "$0")/lib.sh"

lock() {
  [ "${KERASJOB_IMAGES_LOCKED:-0}" != 1 ] || return 0
  mkdir -p "$IMAGES_CACHE"
  exec 9>"$IMAGES_CACHE/.build.lock"
  if ! flock -n 9; then
    log "a build (hack/images/build.sh) is running; waiting for it (up to 30 min)"
    flock -w 1800 9 || die "the build lock $IMAGES_CACHE/.build.lock is still held"
  fi
}

# The --exec-root of a running dockerd; the run directory is its parent.
dockerd_exec_root() {
  { tr '\0' '\n' <"/proc/$1/cmdline"; } 2>/dev/null | sed -n '/^--exec-root$/{n;p;}' | sed -n 1p
}

# PIDs of containerd processes and container shims that belong to our data root but to no
# running dockerd (a dockerd that was SIGKILLed leaves them; its containerd keeps the
# metadata database locked, and a new daemon would then fail to start). A dockerd's own
# containerd reads <exec-root>/containerd/containerd.toml, which names the data root.
stale_processes() {
  local p args=() cfg addr owner
  for p in /proc/[0-9]*; do
    mapfile -d '' args 2>/dev/null <"$p/cmdline" || continue
    [ ${#args[@]} -gt 0 ] || continue
    cfg=""
    case "${args[0]##*/}" in
      containerd)
        [ "${args[1]:-}" = --config ] && cfg="${args[2]:-}" ;;
      containerd-shim*)
        addr="$(printf '%s\n' "${args[@]}" | sed -n '/^-address$/{n;p;}' | sed -n 1p)"
        [ -n "$addr" ] && cfg="$(dirname "$addr")/containerd.toml" ;;
      *) continue ;;
    esac
    if [ -z "$cfg" ] || ! grep -qF "$PRIVATE_DATA_ROOT/" "$cfg" 2>/dev/null; then continue; fi
    # Still owned by a live dockerd of ours?
    owner="$(private_dockerd_pid || true)"
    if [ -n "$owner" ] && [[ "$cfg" == "$(dockerd_exec_root "$owner")/"* ]]; then continue; fi
    echo "${p#/proc/}"
  done
}

# Containers of the private daemon live in their own cgroup, one per data root, so that
# their processes can be found when the daemon and its shims are gone.
CGROUP_PARENT="/kerasjob-images-$(printf '%s' "$PRIVATE_DATA_ROOT" | sha256sum | cut -c1-8)"
container_processes() {
  local d
  for d in /sys/fs/cgroup/*"$CGROUP_PARENT" /sys/fs/cgroup/*/*"$CGROUP_PARENT"; do
    [ -d "$d" ] && find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -u
  return 0
}

# Mount points under our data root or the given run directory, deepest first.
our_mounts() {
  awk -v a="$PRIVATE_DATA_ROOT" -v b="${1:-$PRIVATE_RUN_DIR}" \
    'index($2, a) == 1 || index($2, b"/") == 1 { print $2 }' /proc/self/mounts | sort -r
}

unmount_all() {  # unmount_all RUN_DIR
  local m
  while IFS= read -r m; do
    [ -n "$m" ] || continue
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || warn "could not unmount $m"
  done < <(our_mounts "$1")
  [ -z "$(our_mounts "$1")" ] || die "mounts left behind: $(our_mounts "$1" | tr '\n' ' ')"
}

kill_stale() {
  local pids
  # Containers first (with no dockerd and no shim left, nothing else stops them).
  if ! private_dockerd_pid >/dev/null; then
    pids="$(container_processes | tr '\n' ' ')"
    if [ -n "${pids// /}" ]; then
      log "killing leftover container processes of the private dockerd: $pids"
      # shellcheck disable=SC2086
      kill -KILL $pids 2>/dev/null || true
      sleep 0.5
    fi
  fi
  pids="$(stale_processes | tr '\n' ' ')"
  [ -n "${pids// /}" ] || return 0
  log "stopping leftovers of an earlier private dockerd: $pids"
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null || true
  for _ in $(seq 1 20); do
    [ -n "$(stale_processes)" ] || return 0
    sleep 0.5
  done
  # shellcheck disable=SC2046
  kill -KILL $(stale_processes) 2>/dev/null || true
  sleep 0.5
}

# Wait until the dockerd PID answers on SOCKET (sets DOCKER); 1 if it exits or times out.
wait_ready() {
  local pid="$1" sock="$2"
  for _ in $(seq 1 180); do
    if [ -S "$sock" ] && DOCKER_HOST="unix://$sock" pick_client; then return 0; fi
    kill -0 "$pid" 2>/dev/null && [ -e "/proc/$pid/exe" ] || return 1
    sleep 0.5
  done
  return 1
}

# Where root's capability bounding set lacks a capability Docker grants privileged
# containers (CAP_SYS_RESOURCE on our machines), `docker run --privileged` fails ("unable to
# apply caps"): the daemon's default runtime is then runc-bounded.sh, runc minus those
# capabilities, copied into the run directory. write_config RUN_DIR writes RUN_DIR/daemon.json
# (our own: the host's /etc/docker/daemon.json must not change the daemon) and says whether
# it changed.
write_config() {
  local dir="$1" want missing
  missing="$("$IMAGES_ROOT/hack/images/runc-bounded.sh" --missing)"
  if [ -z "$missing" ]; then
    want='{}'
  else
    install -m 0755 "$IMAGES_ROOT/hack/images/runc-bounded.sh" "$dir/runc-bounded"
    want="{\"runtimes\": {\"runc-bounded\": {\"path\": \"$dir/runc-bounded\"}}, \"default-runtime\": \"runc-bounded\"}"
  fi
  [ "$(cat "$dir/daemon.json" 2>/dev/null)" != "$want" ] || return 1
  echo "$want" >"$dir/daemon.json"
}

start() {
  local sock pid run_dir
  lock
  if pid="$(private_dockerd_pid)"; then
    sock="$(dockerd_socket_of "$pid")"
    wait_ready "$pid" "$sock" \
      || die "dockerd $pid (data root $PRIVATE_DATA_ROOT) does not answer on $sock; restart it: $0 stop && $0 start"
    # A daemon started before the runtime above existed: runtimes are reloaded on SIGHUP.
    run_dir="$(dirname "$(dockerd_exec_root "$pid")")"
    if write_config "$run_dir"; then
      log "reloading the private dockerd's configuration ($run_dir/daemon.json)"
      kill -HUP "$pid"
      sleep 1
    fi
    echo "DOCKER_HOST=unix://$sock"
    return 0
  fi
  [ "$(id -u)" = 0 ] || die "no docker daemon is reachable ('docker info' failed) and a private dockerd needs root: start Docker, or check permissions on /var/run/docker.sock"
  command -v dockerd >/dev/null || die "dockerd not found; install Debian's docker.io (apt-get install docker.io) or start Docker"
  command -v containerd >/dev/null || die "containerd not found; install Debian's docker.io (it depends on containerd)"
  [ "${#PRIVATE_SOCKET}" -lt 100 ] || die "socket path too long for a unix socket: $PRIVATE_SOCKET (set KERASJOB_RUN shorter)"
  kill_stale
  unmount_all "$PRIVATE_RUN_DIR"
  mkdir -p "$PRIVATE_RUN_DIR" "$PRIVATE_DATA_ROOT"
  rm -rf "$PRIVATE_SOCKET" "$PRIVATE_PIDFILE" "$PRIVATE_RUN_DIR/exec"
  write_config "$PRIVATE_RUN_DIR" || true
  log "starting a private dockerd (data root $PRIVATE_DATA_ROOT, log $PRIVATE_LOG)"
  # setsid: its own session, so that the caller's Ctrl-C or job control does not reach it.
  # Every descriptor above 2 closed first: a lock its caller holds (the build's fd 9, a
  # `flock FILE make images` around the whole command) would otherwise stay held as long as
  # the daemon runs, and every later taker of that lock would wait for it forever.
  (
  for fd in /proc/"$BASHPID"/fd/*; do
    fd="${fd##*/}"
    [ "$fd" -le 2 ] || eval "exec $fd>&-"
  done
  exec setsid dockerd \
    --config-file "$PRIVATE_RUN_DIR/daemon.json" \
    --data-root "$PRIVATE_DATA_ROOT" \
    --exec-root "$PRIVATE_RUN_DIR/exec" \
    --pidfile "$PRIVATE_PIDFILE" \
    --host "unix://$PRIVATE_SOCKET" \
    --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false --bridge=none \
    --userland-proxy=false \
    --cgroup-parent "$CGROUP_PARENT" \
    --log-level info \
    </dev/null >>"$PRIVATE_LOG" 2>&1
  ) &
  pid=$!
  if ! wait_ready "$pid" "$PRIVATE_SOCKET"; then
    tail -n 20 "$PRIVATE_LOG" >&2
    die "the private dockerd did not come up; see $PRIVATE_LOG (clean up: $0 stop)"
  fi
  echo "DOCKER_HOST=unix://$PRIVATE_SOCKET"
}

stop() {
  local pid run_dir="$PRIVATE_RUN_DIR"
  lock
  if pid="$(private_dockerd_pid)"; then
    # It may have been started with another KERASJOB_RUN: clean up where it actually runs.
    run_dir="$(dirname "$(dockerd_exec_root "$pid")")"
    log "stopping the private dockerd (pid $pid)"
    kill -TERM "$pid"
    for _ in $(seq 1 60); do [ -e "/proc/$pid/exe" ] || break; sleep 0.5; done
    if [ -e "/proc/$pid/exe" ]; then
      warn "dockerd $pid did not stop in 30 s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
    fi
  fi
  # Its containerd and container shims, if they outlived it.
  kill_stale
  unmount_all "$run_dir"
  # The (now empty) cgroups of its containers.
  local d
  for d in /sys/fs/cgroup/*"$CGROUP_PARENT" /sys/fs/cgroup/*/*"$CGROUP_PARENT"; do
    [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  true
  # Keep the log of the last run; the rest (socket, pid file, exec root) goes.
  if [ -d "$run_dir" ]; then
    find "$run_dir" -mindepth 1 -maxdepth 1 ! -name dockerd.log -exec rm -rf {} +
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status)
    pid="$(private_dockerd_pid)" && sock="$(dockerd_socket_of "$pid")" && [ -S "$sock" ] \
      || { echo "not running" >&2; exit 1; }
    echo "DOCKER_HOST=unix://$sock" ;;
  env)
    pid="$(private_dockerd_pid)" || die "the private dockerd is not running ($0 start)"
    echo "export DOCKER_HOST=unix://$(dockerd_socket_of "$pid")" ;;
  *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
