#!/usr/bin/env bash
# Stop every process hack/cluster/up.sh started and remove the cluster's runtime state.
# Safe to run twice, and when nothing is running. Leaves no process and no bound port behind.
#
# Order: each component's process group (from its pid file), newest first, SIGTERM then
# SIGKILL after a grace period; then any leftover process whose command line names this
# cluster's state directory (e.g. after the pid files were lost); then it waits for the ports.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

GRACE="${CLUSTER_STOP_GRACE:-10}"
cluster_lock

# is_ours PID: the process is one of our components (its executable is named like one) and its
# command line names this cluster's state directory. Pure bash, so no helper process matches.
is_ours() {
  local pid="$1" exe cmd c
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 1
  exe="${exe##*/}"; exe="${exe% (deleted)}"
  for c in "${COMPONENTS[@]}"; do
    if [ "$exe" = "$c" ]; then
      cmd="$(tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline")" || return 1
      [[ "$cmd" == *"$STATE_DIR/"* ]]
      return
    fi
  done
  return 1
}

# Pids of leftover component processes of this cluster (e.g. after the pid files were lost).
strays() {
  local d
  for d in /proc/[0-9]*; do
    if is_ours "${d#/proc/}"; then echo "${d#/proc/}"; fi
  done
  return 0
}

stop_group() {  # stop_group NAME PID
  local name="$1" pid="$2" i
  kill -0 "$pid" 2>/dev/null || return 0
  # Only signal it if it is still what we started (not a reused pid).
  is_ours "$pid" || return 0
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < GRACE * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  log "$name (pid $pid) did not stop in ${GRACE}s; killing it"
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
}

stopped=0
if [ -d "$STATE_DIR/pids" ]; then
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    c="${COMPONENTS[$i]}"
    pid="$(cat "$STATE_DIR/pids/$c.pid" 2>/dev/null || true)"
    [ -n "$pid" ] || continue
    if kill -0 "$pid" 2>/dev/null; then stopped=$((stopped + 1)); fi
    stop_group "$c" "$pid"
  done
fi

left="$(strays)"
if [ -n "$left" ]; then
  log "stopping leftover processes of this cluster: $(echo $left)"
  # shellcheck disable=SC2086
  kill -TERM $left 2>/dev/null || true
  for ((i = 0; i < GRACE * 10; i++)); do
    left="$(strays)"; [ -n "$left" ] || break
    sleep 0.1
  done
  # shellcheck disable=SC2086
  [ -z "$left" ] || kill -KILL $left 2>/dev/null || true
fi

# Ports are released when the processes are gone; wait briefly for the kernel to agree.
busy=()
for ((i = 0; i < 50; i++)); do
  busy=()
  for port in "$ETCD_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" "$KCM_PORT" "$SCHEDULER_PORT" "$KWOK_PORT"; do
    port_in_use "$port" && busy+=("$port")
  done
  [ ${#busy[@]} -gt 0 ] || break
  sleep 0.1
done

rm -rf "$STATE_DIR"
if [ ${#busy[@]} -gt 0 ]; then
  die "stopped the cluster, but ports ${busy[*]} are still in use by something else (see: ss -ltnp)"
fi
if [ "$stopped" -gt 0 ]; then log "cluster stopped and its state removed"; else log "no cluster running; state removed"; fi
