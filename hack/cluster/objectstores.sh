#!/usr/bin/env bash
# Object stores for checkpoints in a bucket, real servers built from their Go modules (pinned
# in hack/cluster/objectstores/*/go.mod) and run as processes on this machine:
#   versitygw        an S3 gateway over a directory (SigV4, multipart, conditional writes)
#   fake-gcs-server  the GCS emulator (JSON API, generations, preconditions)
#
#   hack/cluster/objectstores.sh build     build (or confirm) both cached binaries
#   hack/cluster/objectstores.sh up        build if needed, start both; idempotent; then
#                                          prints the env lines below
#   hack/cluster/objectstores.sh down      stop both, remove their data
#   hack/cluster/objectstores.sh env       print S3_ENDPOINT, GCS_ENDPOINT, the S3 keys and
#                                          the bucket both serve (eval-able)
#
# Opt-in: nothing else builds or starts them (the tests that need a bucket call `up`, and
# `down` when done: kerasjob_dev.objectstores). Each serves one bucket, $OBJECTSTORE_BUCKET.
#
# Env: OBJECTSTORE_HOST (127.0.0.1; the node's bridge IP 10.213.0.1 lets the real node's Pods
# reach them), OBJECTSTORE_S3_PORT (20300), OBJECTSTORE_GCS_PORT (20301),
# OBJECTSTORE_BUCKET (kerasjob), OBJECTSTORE_DIR ($KERASJOB_RUN/objectstores: state, logs).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HOST="${OBJECTSTORE_HOST:-127.0.0.1}"
S3_PORT="${OBJECTSTORE_S3_PORT:-20300}"
GCS_PORT="${OBJECTSTORE_GCS_PORT:-20301}"
BUCKET="${OBJECTSTORE_BUCKET:-kerasjob}"
DIR="${OBJECTSTORE_DIR:-$KERASJOB_RUN/objectstores}"
# The S3 root account of versitygw: test credentials of a server that exists only here.
S3_ACCESS_KEY="kerasjob-test"
S3_SECRET_KEY="kerasjob-test-secret"

VGW_GOMOD="$CLUSTER_DIR/objectstores/versitygw"
GCS_GOMOD="$CLUSTER_DIR/objectstores/fake-gcs-server"
VGW_VERSION="$(awk '$1 == "require" && $2 == "github.com/versity/versitygw" {print $3}' "$VGW_GOMOD/go.mod")"
GCS_VERSION="$(awk '$1 == "require" && $2 == "github.com/fsouza/fake-gcs-server" {print $3}' "$GCS_GOMOD/go.mod")"
BIN_VGW="$(addon_bin versitygw "$VGW_GOMOD" "$VGW_VERSION")"
BIN_GCS="$(addon_bin fake-gcs-server "$GCS_GOMOD" "$GCS_VERSION")"

build() {
  addon_build versitygw "$VGW_GOMOD" "$BIN_VGW" github.com/versity/versitygw/cmd/versitygw
  addon_build fake-gcs-server "$GCS_GOMOD" "$BIN_GCS" github.com/fsouza/fake-gcs-server
}

env_lines() {
  echo "S3_ENDPOINT=http://$HOST:$S3_PORT"
  echo "GCS_ENDPOINT=http://$HOST:$GCS_PORT"
  echo "AWS_ACCESS_KEY_ID=$S3_ACCESS_KEY"
  echo "AWS_SECRET_ACCESS_KEY=$S3_SECRET_KEY"
  echo "OBJECTSTORE_BUCKET=$BUCKET"
}

running() { [ -f "$DIR/$1.pid" ] && kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }

serving() { curl -s -o /dev/null --max-time 1 "$1"; }

start() {  # start NAME URL ARGV...: run ARGV in the background until URL answers
  local name="$1" url="$2" i
  shift 2
  running "$name" && return 0
  "$@" > "$DIR/$name.log" 2>&1 &
  echo $! > "$DIR/$name.pid"
  for ((i = 0; i < 100; i++)); do
    serving "$url" && return 0
    running "$name" || die "$name exited at start: $(tail -5 "$DIR/$name.log")"
    sleep 0.1
  done
  die "$name did not answer at $url in 10 s: $(tail -5 "$DIR/$name.log")"
}

up() {
  build
  mkdir -p "$DIR/s3/$BUCKET" "$DIR/gcs-data/$BUCKET" "$DIR/gcs"
  start versitygw "http://$HOST:$S3_PORT" "$BIN_VGW" --port "$HOST:$S3_PORT" \
    --access "$S3_ACCESS_KEY" --secret "$S3_SECRET_KEY" posix "$DIR/s3"
  start fake-gcs-server "http://$HOST:$GCS_PORT/storage/v1/b" "$BIN_GCS" -scheme http \
    -host "$HOST" -port "$GCS_PORT" -public-host "$HOST:$GCS_PORT" \
    -external-url "http://$HOST:$GCS_PORT" -backend filesystem -filesystem-root "$DIR/gcs" \
    -data "$DIR/gcs-data" -log-level warn
  log "versitygw $VGW_VERSION at http://$HOST:$S3_PORT, fake-gcs-server $GCS_VERSION at" \
    "http://$HOST:$GCS_PORT; bucket $BUCKET on both"
  env_lines
}

down() {
  local name
  for name in versitygw fake-gcs-server; do
    if running "$name"; then
      kill "$(cat "$DIR/$name.pid")" 2>/dev/null || true
    fi
    rm -f "$DIR/$name.pid"
  done
  rm -rf "$DIR"
}

case "${1:-}" in
  build) build ;;
  up) up ;;
  down) down ;;
  env) env_lines ;;
  *) die "usage: hack/cluster/objectstores.sh build|up|down|env" ;;
esac
