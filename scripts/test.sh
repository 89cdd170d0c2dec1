#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, fetches the default model if it is
# not there, runs every test with ctest, then a short burst of every fuzz target (scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# One line per step on stderr, with its seconds ("test: <step>: N s"; scripts/time_readme.sh
# collects them).
t0=$SECONDS
step() { echo "test: $1: $((SECONDS - t0)) s" >&2; t0=$SECONDS; }
scripts/deps.sh
step "apt and pip (deps.sh)"
scripts/build.sh
step "build of every target, the tests included"
.venv/bin/python scripts/fetch_model.py --out models/SmolLM2-135M-Instruct
step "model fetch"
# Two at a time: the tests that run the model run with one BLAS thread each (tests/CMakeLists.txt),
# so two of them share the 2 cores, and the quick ones fill the gaps. `ctest -L quick` is the
# fast subset (docs/testing.md).
#
# The fuzz targets' clang build (scripts/fuzz.sh) runs beside ctest at the lowest priority: ctest
# keeps about 1.8 of 2 cores busy (tests that wait on a lease, a child process or a lock), and the
# build takes the rest (docs/testing.md, "Where the suite's time goes"). Its log:
# build-fuzz/fuzz-build.log.
mkdir -p "${FUZZ_BUILD_DIR:-build-fuzz}"
# In a process group of its own (set -m), so that a failing ctest stops the whole build, make and
# clang too; not in a session of its own (setsid): the kernel's autogroup scheduling shares the CPU
# equally between sessions whatever their nice, and the build then took half the CPU and doubled
# the generate tests' time (measured: `ctest -R Generate -j2` 64 s alone, 68 s beside a nice 19
# build in the same session, 126 s beside one in its own session).
set -m
nice -n 19 scripts/fuzz.sh --build-only >"${FUZZ_BUILD_DIR:-build-fuzz}/build-only.log" 2>&1 &
fuzz_build=$!
set +m
trap 'kill -- -"$fuzz_build" 2>/dev/null || true' EXIT
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure --timeout 900 -j"${CTEST_JOBS:-2}")
step "ctest -j${CTEST_JOBS:-2}"
# A short burst of every libFuzzer target (docs/fuzzing.md); its build is finished first (again,
# at the normal priority, if the one beside ctest failed: that prints the error).
wait "$fuzz_build" || true
trap - EXIT
step "fuzz build left after ctest"
scripts/fuzz.sh --runs 2000
step "fuzz runs"
