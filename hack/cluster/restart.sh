#!/usr/bin/env bash
# restart.sh COMPONENT [--down SECONDS] [--signal SIG]
#
# For fault tests: stop one control-plane component of the local cluster (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, kwok) with SIG (default KILL), keep
# it down SECONDS (default 0), start it again with the very command up.sh started it with
# (launch in lib.sh saved it), and wait until it serves again (the API server's /readyz,
# etcd's client port, else the process). Prints the seconds it was down.
set -euo pipefail
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "$0")/lib.sh"

[ $# -ge 1 ] || die "usage: restart.sh COMPONENT [--down SECONDS] [--signal SIG]"
name="$1"; shift
down=0; sig=KILL
while [ $# -gt 0 ]; do
  case "$1" in
    --down) down="$2"; shift 2 ;;
    --signal) sig="$2"; shift 2 ;;
    *) die "unknown argument: $1" ;;
  esac
done

cluster_lock
[ -f "$PIDS/$name.cmd" ] && [ -f "$PIDS/$name.pid" ] \
  || die "$name was not started by up.sh in $STATE_DIR"
mapfile -d '' argv < "$PIDS/$name.cmd"
pid="$(cat "$PIDS/$name.pid")"
kill "-$sig" "$pid" 2>/dev/null || true
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
! kill -0 "$pid" 2>/dev/null || die "$name (pid $pid) did not stop on SIG$sig"
stopped="$(date +%s.%N)"
sleep "$down"
launch "$name" "${argv[@]}"

case "$name" in
  kube-apiserver)
    serving() {
      [ "$(curl -fsS --max-time 2 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" \
        --key "$PKI/admin.key" "$API_SERVER_URL/readyz" 2>/dev/null)" = ok ]
    } ;;
  etcd) serving() { port_in_use "$ETCD_PORT"; } ;;
  *) serving() { alive "$name"; } ;;
esac
for _ in $(seq 600); do
  if serving; then
    awk -v a="$stopped" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f\n", b - a }'
    exit 0
  fi
  alive "$name" || die "$name exited after its restart: $(tail -5 "$LOGS/$name.log")"
  sleep 0.1
done
die "$name is not serving 60 s after its restart"
