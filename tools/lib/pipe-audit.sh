#!/usr/bin/env bash
# tools/lib/pipe-audit.sh: finds `producer | grep -q ...` in the project's scripts that set
# pipefail. grep -q exits at its first match; a producer still writing (ldd, dmesg, tail, zcat,
# ldconfig -p) then dies of SIGPIPE, and pipefail turns the match into a failure. A slow
# machine loses that race more often (the VM's packages step failed so: "the example does not
# load the installed library" while ldd listed it). Write `producer | grep PATTERN >/dev/null`
# (grep reads everything) or `grep -q PATTERN <<<"$var"` instead.
#
#   source tools/lib/pipe-audit.sh; rdmablk_pipe_audit   prints each such line, returns 1 if any
#   tools/lib/pipe-audit.sh                              the same, as a command

rdmablk_pipe_audit() {
  local root f out hits=""
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
  while IFS= read -r f; do
    # A script is one if it is *.sh or starts with a shell's #!.
    case $f in
      tools/lib/pipe-audit.sh) continue ;; # names the pattern it looks for
      *.sh) ;;
      *) head -c 64 "$root/$f" | head -1 | grep -E '^#!.*(ba)?sh' >/dev/null || continue ;;
    esac
    grep -E 'set -[a-zA-Z]*o pipefail|set -o pipefail' "$root/$f" >/dev/null || continue
    out=$(grep -nE '(^|[^|])\|[[:space:]]*grep +(-[a-zA-Z]*q|--quiet)' "$root/$f" | sed "s|^|$f:|")
    [ -z "$out" ] || hits+="$out"$'\n'
  done < <(cd "$root" && git ls-files tools tests .ci)
  [ -z "$hits" ] && return 0
  echo "tools/lib/pipe-audit.sh: 'producer | grep -q' under pipefail (SIGPIPE can fail the match; write 'grep PATTERN >/dev/null' or 'grep -q PATTERN <<<\"\$var\"'):" >&2
  printf '%s' "$hits" | sed 's/^/  /' >&2
  return 1
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  rdmablk_pipe_audit
fi
