#!/usr/bin/env bash
# Creates (or reuses) .venv-sglang: SGLang 0.5.23 with only what its HiCache modules import
# (sglang.srt.mem_cache.hicache_storage, .storage, .pool_host.mha, .memory_pool_host,
# sglang.srt.managers.cache_controller, sglang.srt.observability.metrics_collector's storage
# metrics), for the SGLang HiCache L3 adapter tests. Usage:
#   scripts/venv_sglang.sh [VENV_DIR]      (default: <repo root>/.venv-sglang)
# About 5.5 GB and ~6 minutes. `pip install sglang==0.5.23` with its dependencies is not an option
# on a CPU machine (flashinfer[cu13], sglang-kernel, deep-ep, flash-mla, tilelang, ...), so:
#   1. torch==2.14.1 (sglang's pin) from PyPI: a CUDA 13 build that runs on CPU; the +cpu index
#      (download.pytorch.org) is not reachable here;
#   2. the packages the modules above import at import time, pinned to the versions tested,
#      installed with their own dependencies under a constraints file holding torch at 2.14.1;
#   3. the sglang wheel with --no-deps (`pip check` then lists sglang's unmet requirements: expected).
# The ucm package (lib/python) is installed editable on top when present.
# get_hash_str (the page-key hash) JIT-compiles a small C++ extension on first call: it needs g++,
# OpenSSL headers (libssl-dev) and `ninja` on PATH (the venv's ninja counts when $V/bin is on PATH).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(git -C "$HERE" rev-parse --show-toplevel 2>/dev/null || pwd)
V=${1:-$ROOT/.venv-sglang}
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
PIP=(-m pip install -q --disable-pip-version-check)

check() {
  PYTHONWARNINGS=ignore "$V/bin/python" - <<'PY'
import torch, sglang
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig, HiCacheStorageExtraInfo
from sglang.srt.mem_cache.storage import StorageBackendFactory
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
import sglang.srt.mem_cache.memory_pool_host
from sglang.srt.managers.cache_controller import HiCacheController
from sglang.srt.observability.metrics_collector import StorageMetrics, StorageMetricsCollector
print("venv_sglang: sglang", sglang.__version__, "torch", torch.__version__,
      "- HiCacheStorage, StorageBackendFactory, MHATokenToKVPoolHost, memory_pool_host, HiCacheController,",
      "StorageMetricsCollector import OK")
PY
}

if [ -x "$V/bin/python" ] && check >/dev/null 2>&1; then
  [ -d "$ROOT/lib/python" ] && "$V/bin/python" "${PIP[@]}" --no-deps -e "$ROOT/lib/python"
  check
  exit 0
fi

"$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || {
  echo "venv_sglang: the sglang 0.5.23 wheel is cp311; set PYTHON to a python3.11" >&2; exit 1; }
[ -x "$V/bin/python" ] || "$PY" -m venv "$V"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cat > "$W/constraints.txt" <<'EOF'
torch==2.14.1
EOF
echo "venv_sglang: installing torch==2.14.1 (PyPI, CUDA 13 build used on CPU; ~3 GB)" >&2
"$V/bin/python" "${PIP[@]}" torch==2.14.1
echo "venv_sglang: installing the import-time dependencies of sglang.srt.mem_cache" >&2
# Pins: sglang's own where it has one (transformers, tokenizers, apache-tvm-ffi, sentencepiece,
# compressed-tensors), otherwise the version tested with sglang 0.5.23 + torch 2.14.1.
"$V/bin/python" "${PIP[@]}" -c "$W/constraints.txt" \
  transformers==5.19.0 tokenizers==0.23.2 apache-tvm-ffi==0.1.11 sentencepiece==0.2.1 \
  compressed-tensors==0.18.0 torchvision==0.29.2 \
  numpy==2.4.6 orjson==3.13.0 psutil==7.2.2 pybase64==1.5.1 requests==2.34.2 pillow==13.0.0 \
  starlette==1.10.0 msgspec==0.22.0 pydantic==2.14.4 pyzmq==27.3.0 tqdm==4.70.1 \
  ipython==9.18.1 aiohttp==3.14.5 dill==0.4.1 loguru==0.7.3 gguf==0.19.0 prometheus-client==0.25.0 \
  ninja pytest
# Last, so that pip's resolver does not list sglang's ~50 deliberately missing requirements.
echo "venv_sglang: installing sglang==0.5.23 --no-deps" >&2
"$V/bin/python" "${PIP[@]}" --no-deps sglang==0.5.23
[ -d "$ROOT/lib/python" ] && "$V/bin/python" "${PIP[@]}" --no-deps -e "$ROOT/lib/python"
check
