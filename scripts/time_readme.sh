#!/usr/bin/env bash
# Times the README's two commands as a new user runs them: a fresh clone of this checkout's HEAD,
# then scripts/setup.sh, then scripts/test.sh, each step's seconds (the scripts' own "setup: ..."
# and "test: ..." lines), printed as a markdown table with the CPU and the commit.
#
#   scripts/time_readme.sh [--dir DIR] [--keep]
#
# --dir DIR: where to clone (default a new directory under /tmp); --keep: leave it there.
# Logs: DIR.setup.log and DIR.test.log beside the clone (kept either way). Exit status: that of
# the first command that failed (0 when both passed). Takes as long as both commands (12 minutes
# on the AMX Xeon on 2026-12-01; the issue measured 39 on the Xeon without bf16 units for an
# earlier commit); run it on an otherwise idle machine.
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=""
KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) echo "time_readme: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$DIR" ]; then DIR=$(mktemp -d /tmp/ucm-readme.XXXXXX) && rmdir "$DIR"; fi
[ -e "$DIR" ] && { echo "time_readme: $DIR exists; pass another --dir" >&2; exit 2; }
commit=$(git rev-parse --short HEAD)
[ -n "$(git status --porcelain --untracked-files=no)" ] && echo "time_readme: uncommitted changes are not in the clone (HEAD $commit)" >&2
git clone -q . "$DIR" || exit 1
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
flags=$(grep -m1 '^flags' /proc/cpuinfo)
isa=""
for f in amx_bf16 avx512_bf16 avx512f avx2; do case " $flags " in *" $f "*) isa="$isa${isa:+, }$f" ;; esac; done
rc=0
run() {  # name, script
  local start=$SECONDS
  (cd "$DIR" && "$2") >"$DIR.$1.log" 2>&1
  local r=$?
  echo "| **$1** (\`$2\`) | **$(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s** | exit $r |"
  grep -E "^$1: .*: [0-9]+ s$" "$DIR.$1.log" | sed -E "s/^$1: (.*): ([0-9]+) s$/| \1 | \2 s | |/"
  return $r
}
echo "README commands on a fresh clone of $commit, $cpu ($isa), $(nproc) cores, $(date -u +%F)"
echo
echo "| step | time | |"
echo "|---|---|---|"
run setup scripts/setup.sh || rc=$?
if [ "$rc" = 0 ]; then
  run test scripts/test.sh || rc=$?
  ctest_line=$(grep -E 'tests passed|tests failed' "$DIR.test.log" | tail -1)
  [ -n "$ctest_line" ] && echo && echo "ctest: $ctest_line"
fi
echo
echo "logs: $DIR.setup.log, $DIR.test.log"
[ "$KEEP" = 1 ] || rm -rf "$DIR"
exit "$rc"
