#!/usr/bin/env bash
# The SGLang integration tests (docs/sglang.md): the ucm.sglang HiCache storage backend inside
# SGLang 0.5.23's own pieces on CPU (.venv-sglang, made by scripts/venv_sglang.sh): the page keys
# against SGLang's get_hash_str / storage_namespace_seed (tests/sglang/test_keys_sglang.py), and the
# backend built by SGLang's storage factory reading a real precomputed store into SGLang's host pool
# in every layout, at TP 1 and TP 3 (tests/sglang/test_backend_sglang.py); then the batch_exists
# benchmark against the vLLM connector's lookup path. A live SGLang server needs a GPU: not here.
# The store: $UCM_SGLANG_STORE, else out/sglang-test/store, precomputed (4 python3.11-doc pages,
# SmolLM2-135M-Instruct, about 1 minute on 2 cores) and given its page table for page size 64.
# Not part of .ci/run (the venv is 5.5 GB); about 3 minutes once the venv exists.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/venv_sglang.sh
[ -x "${BUILD_DIR:-build}/bin/ucm" ] || scripts/build.sh
[ -f models/SmolLM2-135M-Instruct/config.json ] || .venv/bin/python scripts/fetch_model.py --out models/SmolLM2-135M-Instruct
export UCM_BIN=$PWD/${BUILD_DIR:-build}/bin/ucm UCM_LIB=$PWD/${BUILD_DIR:-build}/lib/libucm.so PYTHONPATH=$PWD/lib/python
export PATH=$PWD/.venv-sglang/bin:$PATH TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/out/torch_extensions}
STORE=${UCM_SGLANG_STORE:-$PWD/out/sglang-test/store}
if [ ! -f "$STORE/UCMSTORE" ]; then
  "$UCM_BIN" precompute --model models/SmolLM2-135M-Instruct --corpus /usr/share/doc/python3.11/html/_sources \
    --corpus-suffix .rst.txt --store "$STORE" --template configs/template_chat.txt --limit 4 --resume --progress
fi
"$UCM_BIN" sglang-pages "$STORE" --page-size 64
# The tests write pages (format 5 from then on): they get a scratch copy, the store stays as made.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp -r "$STORE" "$scratch/store"
export UCM_SGLANG_STORE=$scratch/store
.venv-sglang/bin/python -m pytest -q -p no:cacheprovider tests/sglang/test_keys_sglang.py tests/sglang/test_backend_sglang.py "$@"
.venv-sglang/bin/python scripts/bench_sglang_exists.py "$UCM_SGLANG_STORE" --ucm "$UCM_BIN"
