#!/usr/bin/env bash
# The shell half of `make lint`: shellcheck (Debian's package, installed by hack/deps.sh) on
# every shell script of the project, then one rule shellcheck does not know.
#
# The rule: under `set -o pipefail`, no pipe into `grep -q` or `head`. Both exit at their
# first match or line; a writer that is still writing then dies of SIGPIPE, and pipefail
# turns that into the pipeline's failure (etcd's version piped into a quiet grep failed 8-11 % of
# runs on an idle machine and so failed a cold `make demo`). Capture the output first
# (`[[ "$(cmd)" == *x* ]]`, `grep -q x <<<"$(cmd)"`), or use a reader that reads to the end
# (`grep x >/dev/null`, `sed -n 1p`).
#
#   hack/lint-shell.sh            check every script (exit 1 on any finding)
#   hack/lint-shell.sh FILE...    check these files only
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The project's shell scripts: *.sh, and files with a sh or bash shebang under hack/ and .ci/.
scripts() {
  local f first
  while IFS= read -r f; do
    case "$f" in
      *.sh) echo "$f" ;;
      hack/* | .ci/*)
        IFS= read -r first <"$f" || true
        [[ "$first" =~ ^\#!.*(/|[[:space:]])(ba)?sh([[:space:]]|$) ]] && echo "$f"
        ;;
    esac
  done < <(git ls-files)
}

# file:line: text of each pipe into `grep -q`/`grep --quiet`/`head` in a script that sets
# pipefail (comment lines are skipped; a line may end in a comment).
sigpipe_prone() {
  local f
  for f in "$@"; do
    grep -q 'pipefail' "$f" || continue
    awk -v f="$f" '
      /^[[:space:]]*#/ { next }
      /\|[[:space:]]*(grep[[:space:]]+(-[[:alnum:]]*q[[:alnum:]]*|--quiet)|hea[d])([[:space:]]|$|\))/ {
        printf "%s:%d: pipe into grep -q or head under pipefail (SIGPIPE can fail it): %s\n", f, NR, $0
        bad = 1
      }
      END { exit bad }' "$f" || true
  done
}

if [ $# -gt 0 ]; then files=("$@"); else mapfile -t files < <(scripts); fi
command -v shellcheck >/dev/null \
  || { echo "lint-shell: shellcheck not found: run 'make deps' (Debian package shellcheck)" >&2; exit 1; }
status=0
shellcheck --severity=warning --format=gcc "${files[@]}" || status=1
found="$(sigpipe_prone "${files[@]}")"
if [ -n "$found" ]; then
  echo "$found"
  status=1
fi
[ "$status" = 0 ] && echo "lint-shell: ${#files[@]} scripts, shellcheck and the SIGPIPE rule clean"
exit "$status"
