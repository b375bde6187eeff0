#!/usr/bin/env bash
# runc, minus the capabilities this machine's root cannot grant: the private dockerd's default
# runtime where root's bounding set lacks some (hack/images/dockerd.sh). See
# hack/images/README.md, "Capabilities".
#
# A privileged container (`docker run --privileged`, as kind runs its nodes) or a privileged
# exec gets every capability Docker knows; when the daemon's own bounding set lacks one
# (CAP_SYS_RESOURCE on our machines), runc's capset fails: "unable to apply caps: operation
# not permitted". For `create`, `run` and `exec`, this removes the capabilities missing from
# our bounding set from the bundle's config.json (or exec's --process file), then runs runc
# with the same arguments. Every other call goes to runc unchanged.
#
#   runc-bounded.sh --missing     print the missing capabilities, one a line (none: nothing)
set -euo pipefail
RUNC="${KERASJOB_RUNC:-runc}"

# Capability numbers (linux/capability.h, a stable ABI) and their names in OCI specs.
CAPS=(CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP
  LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER
  SYS_MODULE SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE
  SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP
  MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF
  CHECKPOINT_RESTORE)

# The capabilities (CAP_* names) the kernel has and our bounding set lacks.
missing_caps() {
  local bnd last i
  bnd=$((16#$(sed -n 's/^CapBnd:[[:space:]]*//p' /proc/self/status)))
  last="$(cat /proc/sys/kernel/cap_last_cap)"
  for ((i = 0; i <= last && i < ${#CAPS[@]}; i++)); do
    ((bnd >> i & 1)) || echo "CAP_${CAPS[$i]}"
  done
}

# filter FILE JQ_PATH: drop the missing capabilities from every list under JQ_PATH of FILE.
filter() {
  local file="$1" path="$2" drop
  [ -f "$file" ] || return 0
  drop="$(missing_caps | jq -R . | jq -sc .)"
  [ "$drop" != "[]" ] || return 0
  jq -c --argjson drop "$drop" \
    "if $path then $path |= with_entries(.value |= (if type == \"array\" then map(select(. as \$c | \$drop | index(\$c) | not)) else . end)) else . end" \
    "$file" >"$file.kerasjob-tmp"
  mv -f "$file.kerasjob-tmp" "$file"
}

if [ "${1:-}" = --missing ]; then missing_caps; exit 0; fi

cmd="" bundle="" process="" prev=""
for a in "$@"; do
  case "$prev" in
    --bundle | -b) bundle="$a" ;;
    --process | -p) process="$a" ;;
  esac
  case "$a" in
    --bundle=*) bundle="${a#--bundle=}" ;;
    --process=*) process="${a#--process=}" ;;
    create | run | exec) [ -n "$cmd" ] || cmd="$a" ;;
  esac
  prev="$a"
done
case "$cmd" in
  create | run) filter "${bundle:-.}/config.json" .process.capabilities ;;
  exec) [ -z "$process" ] || filter "$process" .capabilities ;;
esac
exec "$RUNC" "$@"
