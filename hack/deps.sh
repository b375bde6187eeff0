#!/usr/bin/env bash
# What `make demo` and `make test` need on the machine before they build anything, installed
# or checked in one idempotent step (`make deps`; .ci/run reaches it through `make test`).
#
#   hack/deps.sh            install the missing Debian packages (root), check Go and Python
#   hack/deps.sh --check    only say what is missing (exit 1 when something is)
#
# Debian packages, and what needs them:
#   iproute2 iptables runc containernetworking-plugins conntrack util-linux
#                      the local cluster's real node (hack/cluster/node.sh)
#   docker.io debootstrap   the images (hack/images/build.sh: a private dockerd, a local base)
#   openssl curl ca-certificates   the control plane's certificates and health probes
#   jq                 Kueue's install (hack/cluster/kueue.sh), hack/images/runc-bounded.sh
#   clang-19 (no recommends)   Cilium compiles its datapath at run time (hack/cluster/cilium.sh)
#   chromium           headless screenshot of the documentation site (tests/unit/test_docs.py)
#   Debian's shellcheck   make lint's shell half (hack/lint-shell.sh)
# Checked, not installed: root (containers, network namespaces), Go >= 1.26 (the control plane
# and its add-ons are built from Go modules), Python >= 3.11 (tomllib, datetime.UTC).
set -euo pipefail

check_only=0
[ "${1:-}" = --check ] && check_only=1
say() { echo "deps: $*" >&2; }
fail() { say "$*"; exit 1; }

need=()
command -v ip >/dev/null || need+=(iproute2)
command -v iptables >/dev/null || need+=(iptables)
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v conntrack >/dev/null || need+=(conntrack)
command -v nsenter >/dev/null || need+=(util-linux)
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v openssl >/dev/null || need+=(openssl)
command -v curl >/dev/null || need+=(curl ca-certificates)
command -v jq >/dev/null || need+=(jq)
command -v chromium >/dev/null || need+=(chromium)
command -v shellcheck >/dev/null || need+=(shellcheck)
lean=()
command -v clang-19 >/dev/null || lean+=(clang-19)

if [ ${#need[@]} -gt 0 ] || [ ${#lean[@]} -gt 0 ]; then
  missing="${need[*]} ${lean[*]}"
  [ "$check_only" = 0 ] || fail "missing Debian packages: ${missing# }"
  [ "$(id -u)" = 0 ] || fail "missing Debian packages: ${missing# } (run as root, or: sudo apt-get install ${missing# })"
  say "installing Debian packages: ${missing# } (once; about a minute)"
  # apt's chatter (debconf's "delaying package configuration", needrestart's Perl warnings
  # without a terminal) goes to a log, shown only when the install fails.
  apt_log="$(mktemp)"
  apt_get() {
    DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 apt-get "$@" >>"$apt_log" 2>&1 \
      || { tail -n 20 "$apt_log" >&2; fail "apt-get $1 failed (log: $apt_log)"; }
  }
  apt_get update -qq
  [ ${#need[@]} -eq 0 ] || apt_get install -y -qq "${need[@]}"
  [ ${#lean[@]} -eq 0 ] || apt_get install -y -qq --no-install-recommends "${lean[@]}"
  rm -f "$apt_log"
fi

[ "$(id -u)" = 0 ] || fail "the local cluster's real node needs root (containers, network namespaces, cgroups)"

go_bin=$(command -v go || { [ -x /usr/local/go/bin/go ] && echo /usr/local/go/bin/go; } || true)
[ -n "$go_bin" ] || fail "Go >= 1.26 not found (the control plane is built from Go modules): https://go.dev/doc/install"
go_ver=$("$go_bin" env GOVERSION | sed 's/^go//')
printf '1.26\n%s\n' "$go_ver" | sort -V -C || fail "Go $go_ver is too old: 1.26 or newer is needed"

python=${PYTHON:-python3}
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
  || fail "$python is not Python >= 3.11 (found: $("$python" --version 2>&1 || echo none)); set PYTHON=python3.11"
exit 0
