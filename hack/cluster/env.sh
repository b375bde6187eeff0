#!/usr/bin/env bash
# Print shell exports for kubectl/helm against the local cluster:
#   eval "$(make -s cluster-env)"      # or: eval "$(hack/cluster/env.sh)"
# With --bin-dir, print only the directory of the pinned binaries.
# Our binary directory goes first on PATH (a system /usr/bin/kubectl may exist and is not ours).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

case "${1:-}" in
  --bin-dir) bin_dir ;;
  --kubeconfig) echo "$STATE_DIR/kubeconfig" ;;
  "")
    printf 'export KUBECONFIG=%q\n' "$STATE_DIR/kubeconfig"
    printf 'export PATH=%q:"$PATH"\n' "$(bin_dir)"
    ;;
  *) die "unknown argument '$1' (usage: env.sh [--bin-dir | --kubeconfig])" ;;
esac
