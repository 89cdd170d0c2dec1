#!/usr/bin/env bash
# The vLLM integration test (docs/vllm.md): the UcmConnector on a real vLLM (the CPU build, its own
# .venv-vllm made by scripts/venv_vllm.sh), SmolLM2-135M-Instruct and python3.11-doc documents:
# exactness (fp32, save then load in a fresh process), a store precomputed by ucm (top-1 / KL
# against vLLM's prefill), a corrupt block (recomputed), refusal of another dtype; and the connector
# under load (tests/vllm/test_vllm_load.py: preemption, chunked prefill, load failures, gc between
# lookup and load and beside a live saving server, a store gone mid-run, two saving servers); the
# connector's saves and loads as vLLM KV events (tests/vllm/test_vllm_events.py); under vLLM's
# defaults with damaged blocks, preemption, cache salts (tests/vllm/test_vllm_defaults.py). No GPU
# needed; about 80-100 minutes on 2 cores (the load/save tests run twice, see below). Not part of .ci/run (size); run it by hand. The soak:
# scripts/soak_vllm.py.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/venv_vllm.sh
[ -x "${BUILD_DIR:-build}/bin/ucm" ] || scripts/build.sh
[ -f models/SmolLM2-135M-Instruct/config.json ] || .venv/bin/python scripts/fetch_model.py --out models/SmolLM2-135M-Instruct
export UCM_BIN=$PWD/${BUILD_DIR:-build}/bin/ucm UCM_LIB=$PWD/${BUILD_DIR:-build}/lib/libucm.so VLLM_CPU_KVCACHE_SPACE=1
PY=".venv-vllm/bin/python -m pytest -q -s -p no:cacheprovider"
# vLLM's own defaults first (prefix caching on, kv_load_failure_policy unset), every test; then the
# load/save engine tests again with the settings the tests used before issue 56 (prefix caching
# off, policy "recompute"): tests/vllm/test_vllm.py, SETTINGS.
UCM_VLLM_SETTINGS=defaults $PY tests/vllm/test_cpu_cache.py tests/vllm/test_gpu_layouts.py tests/vllm/test_vllm.py \
  tests/vllm/test_vllm_load.py tests/vllm/test_vllm_defaults.py tests/vllm/test_events.py tests/vllm/test_vllm_events.py "$@"
UCM_VLLM_SETTINGS=legacy $PY tests/vllm/test_vllm.py tests/vllm/test_vllm_load.py "$@"
