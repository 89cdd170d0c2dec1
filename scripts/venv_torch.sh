#!/usr/bin/env bash
# Creates (or reuses) .venv-torch: PyTorch (CPU use; the PyPI wheel) + transformers + numpy +
# pytest, for the integration checks that need a real Hugging Face model run
# (scripts/test_python_hf.sh). Kept apart from .venv, which stays torch-free. About 3 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
V=${VENV_TORCH:-.venv-torch}
PY=${PYTHON:-python3}
if [ ! -x "$V/bin/python" ]; then
  echo "venv_torch: creating $V" >&2
  $PY -m venv "$V"
fi
if ! "$V/bin/python" -c "import torch, transformers, numpy, pytest" 2>/dev/null; then
  echo "venv_torch: pip install torch transformers numpy pytest (a few minutes)" >&2
  "$V/bin/python" -m pip install -q --disable-pip-version-check torch "transformers>=5" numpy pytest
fi
"$V/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e lib/python
"$V/bin/python" -c "import torch, transformers; print('venv_torch: torch', torch.__version__, 'transformers', transformers.__version__)"
