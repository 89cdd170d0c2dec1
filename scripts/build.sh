#!/usr/bin/env bash
# Configures and builds ucm into build/ (override with BUILD_DIR). Extra args go to cmake.
# TARGETS="a b" builds only those targets (scripts/setup.sh: the binaries and libucm, no tests).
# A Release build with warnings as errors (UCM_WERROR=ON): both README commands and CI build this
# way, so CI proves the Release build with Debian's GCC; BUILD_TYPE=RelWithDebInfo|Debug and
# WERROR=OFF override. A plain `cmake` build is RelWithDebInfo without -Werror
# (scripts/check_builds.sh builds the other types and Clang).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" -DUCM_WERROR="${WERROR:-ON}" "$@" >"$BUILD_DIR/configure.log" 2>&1 \
  || { cat "$BUILD_DIR/configure.log"; exit 1; }
if [ -n "${TARGETS:-}" ]; then
  # shellcheck disable=SC2086  # a list of target names
  cmake --build "$BUILD_DIR" -j"$JOBS" --target $TARGETS
else
  cmake --build "$BUILD_DIR" -j"$JOBS"
fi
