#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, fetches the default model if it is
# not there, and runs every test with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
.venv/bin/python scripts/fetch_model.py --out models/SmolLM2-135M-Instruct
cd "${BUILD_DIR:-build}"
ctest --output-on-failure --timeout 900 -j1
