#!/usr/bin/env bash
# What `make demo` and `make test` need on the machine before they build anything, installed
# or checked in one idempotent step (`make deps-demo`, `make deps`; .ci/run reaches the
# latter through `make test`).
#
#   hack/deps.sh [test]     install the missing Debian packages of `make test` (root), check
#                           Go and Python
#   hack/deps.sh demo       the same for `make demo`: its set only
#   hack/deps.sh SET --check   only say what is missing (exit 1 when something is)
#   hack/deps.sh SET --list    print the set's Debian packages, one a line
#
# Debian packages, and what needs them. The demo's set (its cluster, images and run):
#   iproute2 iptables runc containernetworking-plugins conntrack util-linux
#                      the local cluster's real node (hack/cluster/node.sh)
#   docker.io debootstrap   the images (hack/images/build.sh: a private dockerd, a local base)
#   openssl curl ca-certificates   the control plane's certificates and health probes
#   jq                 hack/images/runc-bounded.sh (the private dockerd's runtime), Kueue's
#                      install (hack/cluster/kueue.sh)
# `make test`'s set adds what only the tests and the lint use:
#   clang-19 (no recommends)   Cilium compiles its datapath at run time (hack/cluster/cilium.sh,
#                      the NetworkPolicy e2e test)
#   chromium           headless screenshot of the documentation site (tests/unit/test_docs.py)
#   Debian's shellcheck   make lint's shell half (hack/lint-shell.sh)
# Checked, not installed: root (containers, network namespaces), Go >= 1.26 (the control plane
# and its add-ons are built from Go modules), Python >= 3.11 (tomllib, datetime.UTC).
set -euo pipefail

DEMO_PACKAGES=(iproute2 iptables runc containernetworking-plugins conntrack util-linux
  docker.io debootstrap openssl curl ca-certificates jq)
TEST_PACKAGES=(chromium shellcheck)
#: Installed without their recommends (clang-19's would pull in a toolchain's worth).
TEST_LEAN_PACKAGES=(clang-19)

set_name=test check_only=0 list_only=0
for arg in "$@"; do
  case "$arg" in
    demo | test) set_name="$arg" ;;
    --check) check_only=1 ;;
    --list) list_only=1 ;;
    *) echo "usage: hack/deps.sh [demo|test] [--check|--list]" >&2; exit 2 ;;
  esac
done
say() { echo "deps: $*" >&2; }
fail() { say "$*"; exit 1; }

packages=("${DEMO_PACKAGES[@]}")
lean_packages=()
if [ "$set_name" = test ]; then
  packages+=("${TEST_PACKAGES[@]}")
  lean_packages+=("${TEST_LEAN_PACKAGES[@]}")
fi
if [ "$list_only" = 1 ]; then
  printf '%s\n' "${packages[@]}" ${lean_packages[@]+"${lean_packages[@]}"}
  exit 0
fi

# present PACKAGE: what is needed of PACKAGE is on this machine.
present() {
  case "$1" in
    iproute2) command -v ip ;;
    containernetworking-plugins) [ -x /usr/lib/cni/bridge ] ;;
    util-linux) command -v nsenter ;;
    docker.io) command -v dockerd ;;
    ca-certificates) command -v curl ;;  # installed with curl
    *) command -v "$1" ;;
  esac >/dev/null
}

need=()
for package in "${packages[@]}"; do present "$package" || need+=("$package"); done
lean=()
for package in ${lean_packages[@]+"${lean_packages[@]}"}; do
  present "$package" || lean+=("$package")
done

if [ ${#need[@]} -gt 0 ] || [ ${#lean[@]} -gt 0 ]; then
  missing="${need[*]} ${lean[*]}"
  missing="${missing% }"
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
