#!/usr/bin/env bash
# The build matrix a user may bring (issue 55): a plain `cmake` build (no -Werror, as
# CMakeLists.txt defaults) of the `ucm` binary, `ucm-torch` and libucm, for each compiler and build
# type asked, each in a build directory of its own. Outside the test suite (each build is minutes of
# 2 cores); CI's own build (scripts/build.sh: Release, GCC, -Werror) is the Release/GCC case.
#
#   scripts/check_builds.sh [--compilers gcc,clang] [--types Release,RelWithDebInfo,Debug]
#                           [--out DIR] [--werror]
#
# --compilers  gcc: Debian's g++ (12 on Debian 12); clang: Debian's clang++ (14), installed through
#              apt if missing. Default both.
# --types      CMake build types. Default Release,RelWithDebInfo,Debug.
# --out DIR    Build directories DIR/<compiler>-<type> (default build-matrix/), kept for reruns.
# --werror     Configure with -DUCM_WERROR=ON too (what the project's own builds use).
#
# Prints a table (compiler, type, result, seconds, warnings in project code) and exits 1 if any
# build failed, 0 otherwise; each build's log is DIR/<compiler>-<type>/build.log.
set -uo pipefail
cd "$(dirname "$0")/.."
COMPILERS=gcc,clang
TYPES=Release,RelWithDebInfo,Debug
OUT=build-matrix
WERROR=OFF
while [ $# -gt 0 ]; do
  case "$1" in
    --compilers) COMPILERS=$2; shift 2 ;;
    --types) TYPES=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --werror) WERROR=ON; shift ;;
    -h|--help) sed -n 2,17p "$0"; exit 0 ;;
    *) echo "check_builds: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [[ ",$COMPILERS," == *,clang,* ]] && ! command -v clang++ >/dev/null; then
  echo "check_builds: installing clang (apt)" >&2
  apt-get install -y -q clang >/dev/null || { echo "check_builds: apt-get install clang failed" >&2; exit 1; }
fi
TARGETS="ucm_cli ucm_torch_cli ucm"
rows=()
failed=0
IFS=, read -ra cs <<<"$COMPILERS"
IFS=, read -ra ts <<<"$TYPES"
for c in "${cs[@]}"; do
  case "$c" in
    gcc) cc=gcc cxx=g++ ;;
    clang) cc=clang cxx=clang++ ;;
    *) echo "check_builds: unknown compiler $c (gcc or clang)" >&2; exit 2 ;;
  esac
  for t in "${ts[@]}"; do
    dir=$OUT/$c-$t
    mkdir -p "$dir"
    echo "check_builds: $c $t in $dir" >&2
    start=$(date +%s)
    if CC=$cc CXX=$cxx cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$t" -DUCM_WERROR=$WERROR -DUCM_BUILD_TESTS=OFF \
         >"$dir/configure.log" 2>&1 &&
       cmake --build "$dir" -j"$(nproc)" --target $TARGETS >"$dir/build.log" 2>&1; then
      result=ok
    else
      result=FAILED
      failed=1
    fi
    secs=$(($(date +%s) - start))
    warnings=$(grep -c -E "^$PWD/.*: warning:" "$dir/build.log" || true)
    rows+=("| $c ($($cxx -dumpversion)) | $t | $result | $secs | $warnings |")
  done
done
echo "| compiler | build type | ucm, ucm-torch, libucm | seconds | warnings in project code |"
echo "|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
exit $failed
