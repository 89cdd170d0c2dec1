#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, fetches the default model if it is
# not there, runs every test with ctest, then a short burst of every fuzz target (scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
.venv/bin/python scripts/fetch_model.py --out models/SmolLM2-135M-Instruct
# Two at a time: the tests that run the model hold the resource lock `cpu` (tests/CMakeLists.txt),
# so they run one after another while the quick ones run beside them. `ctest -L quick` is the
# fast subset (docs/testing.md).
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure --timeout 900 -j"${CTEST_JOBS:-2}")
# A short burst of every libFuzzer target (docs/fuzzing.md): builds build-fuzz/ with clang first.
scripts/fuzz.sh --runs 2000
