#!/usr/bin/env bash
# The main job, end to end on a fresh machine: install, build, fetch the default model and
# corpus, precompute the KV cache of the first documents of the corpus into a store, inspect it.
set -euo pipefail
cd "$(dirname "$0")/.."
DOCS=${DOCS:-12}
STORE=${STORE:-stores/python311-doc}
CORPUS=${CORPUS:-/usr/share/doc/python3.11/html/_sources}
# One line per step on stderr, with its seconds ("setup: <step>: N s"; scripts/time_readme.sh
# collects them).
t0=$SECONDS
step() { echo "setup: $1: $((SECONDS - t0)) s" >&2; t0=$SECONDS; }
scripts/deps.sh
step "apt and pip (deps.sh)"
# The model is fetched while the build runs (one is network and one core, the other both cores).
mkdir -p models
.venv/bin/python scripts/fetch_model.py --out models/SmolLM2-135M-Instruct >models/fetch.log 2>&1 &
fetch=$!
# The main job needs `ucm`, `ucm-torch` and libucm only: the tests are built by scripts/test.sh.
TARGETS="ucm_cli ucm_torch_cli ucm" scripts/build.sh || { kill "$fetch" 2>/dev/null; exit 1; }
if ! wait "$fetch"; then
  cat models/fetch.log >&2
  echo "setup: fetching the model failed (above); rerun scripts/setup.sh" >&2
  exit 1
fi
cat models/fetch.log >&2
step "build of ucm, ucm-torch and libucm (the model fetched beside it)"
bin=${BUILD_DIR:-build}/bin/ucm
"$bin" --version
"$bin" precompute --model models/SmolLM2-135M-Instruct --corpus "$CORPUS" --corpus-suffix .rst.txt \
  --store "$STORE" --template configs/template_chat.txt --limit "$DOCS" --resume --progress
"$bin" inspect "$STORE" --docs
"$bin" inspect "$STORE"
step "precompute of $DOCS documents and inspect"
