#!/usr/bin/env bash
# Stop every process hack/cluster/up.sh started and remove the cluster's runtime state.
# Safe to run twice, and when nothing is running. Leaves no process and no bound port behind.
#
# Order: every component's process group (from its pid file) gets SIGTERM at once, SIGKILL
# after a grace period; then any leftover component process whose command line names this
# cluster's state directory (e.g. after the pid files were lost); then it waits for the ports.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

GRACE="${CLUSTER_STOP_GRACE:-10}"
cluster_lock

# The real node first: its kubelet must not outlive the API server's state, and its
# containers, mounts, cgroups and iptables rules go with it. Its bridge goes last (below).
# (The bridge alone, with no state directory, is a crashed run's leftover only when no other
# checkout's node uses it: a KERASJOB_NODE=0 cluster beside a real node must not take the
# real node's bridge down.)
node_ours() {
  [ -d "$NODE_DIR" ] && return 0
  [ "$KERASJOB_NODE" = 1 ] && ip link show "$NODE_BRIDGE" >/dev/null 2>&1 && [ -z "$(other_node)" ]
}
if node_ours; then
  "$CLUSTER_DIR/node.sh" down
fi

# is_ours PID: the process is one of our components (argv[0] is named like one) and its
# command line names this cluster's state directory. Bash builtins only: no helper process
# can match, and scanning /proc stays fast.
is_ours() {
  local args=() c
  mapfile -d '' args 2>/dev/null < "/proc/$1/cmdline" || return 1
  [ ${#args[@]} -gt 0 ] || return 1
  for c in "${COMPONENTS[@]}" "${ADDON_COMPONENTS[@]}"; do
    if [ "${args[0]##*/}" = "$c" ]; then
      [[ "${args[*]}" == *"$STATE_DIR/"* ]]
      return
    fi
  done
  for c in "${NODE_COMPONENTS[@]}"; do
    if [ "${args[0]##*/}" = "$c" ]; then
      [[ "${args[*]}" == *"$NODE_DIR/"* ]]
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

# Two waves: every component but etcd, then etcd (the API server, stopping, still writes its
# endpoint lease and would wait for an etcd already gone). Each wave: SIGTERM to each process
# group, wait up to $GRACE s, then SIGKILL what is left. The state is thrown away, so no
# finer order is needed.
stopped=0
declare -A name_of=()
stop_wave() {  # stop_wave COMPONENT...
  local c pid i pids=() alive
  for c in "$@"; do
    pid="$(cat "$STATE_DIR/pids/$c.pid" 2>/dev/null || true)"
    # Only signal it if it is still what we started (not a reused pid).
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && is_ours "$pid" || continue
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    pids+=("$pid"); name_of[$pid]="$c"; stopped=$((stopped + 1))
  done
  for ((i = 0; i < GRACE * 10 && ${#pids[@]} > 0; i++)); do
    alive=()
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
    pids=("${alive[@]}")
    [ ${#pids[@]} -gt 0 ] && sleep 0.1
  done
  for pid in "${pids[@]}"; do
    log "${name_of[$pid]} (pid $pid) did not stop in ${GRACE}s; killing its process group"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  done
}
# The training-operator (bench/compare_tfjob.py) runs in a mount namespace of its own, where its
# command line cannot name the state directory (is_ours): its script stops it by pid file.
if [ -f "$STATE_DIR/pids/training-operator.pid" ]; then
  "$CLUSTER_DIR/training-operator.sh" down
fi
if [ -d "$STATE_DIR/pids" ]; then
  wave=("${ADDON_COMPONENTS[@]}")
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    [ "${COMPONENTS[$i]}" = etcd ] || wave+=("${COMPONENTS[$i]}")
  done
  stop_wave "${wave[@]}"
  stop_wave etcd
fi

left="$(strays)"
if [ -n "$left" ]; then
  log "stopping leftover processes of this cluster: $(echo $left)"
  stopped=$((stopped + $(wc -w <<< "$left")))
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
# Last, the node's bridge: the API server listened on its address.
if node_ours; then
  "$CLUSTER_DIR/node.sh" network-down
fi
if [ ${#busy[@]} -gt 0 ]; then
  die "stopped the cluster, but ports ${busy[*]} are still in use by something else (see: ss -ltnp)"
fi
if [ "$stopped" -gt 0 ]; then log "cluster stopped and its state removed"; else log "no cluster running; state removed"; fi
