#!/usr/bin/env bash
# Installs everything ucm needs on a fresh Debian 12 machine: apt packages and a Python venv
# (.venv) with the development-time tools used to fetch and convert the default model.
# Idempotent: skips what is already installed. Needs root (or sudo) for apt.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake pkg-config git python3 python3-venv
  libcli11-dev librocksdb-dev libtbb-dev libspdlog-dev libtorch-dev libgtest-dev
  libopenblas0-pthread nlohmann-json3-dev libxxhash-dev libssl-dev libyaml-cpp-dev
  liburing-dev libpcre2-dev libicu-dev
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev   # ucm events (ZeroMQ, msgpack)
  python3.11-doc
  gnuplot-nox
  universal-ctags                              # scripts/check_function_length.py (tests/python)
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "deps: creating .venv" >&2
  $PY -m venv .venv
fi
# gguf/safetensors: the model fetch; pytest: tests/python; transformers (no torch: tokenizers
# only): `python -m ucm.tokenize` and the tokenizer tests, the server's tokenizer;
# scikit-build-core: the packaging test builds lib/python's wheel (libucm inside) without network
# (tests/python/test_packaging.py).
if ! .venv/bin/python -c "import gguf, numpy, safetensors, pytest, transformers, scikit_build_core" 2>/dev/null; then
  echo "deps: pip install gguf numpy safetensors pytest transformers scikit-build-core" >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check gguf numpy safetensors pytest "transformers>=5" \
    "scikit-build-core>=0.10"
fi
# The ucm Python package of this checkout, as source (a .pth file, not `pip install -e`, which
# would build a second libucm): it loads build/lib/libucm.so of this checkout (ucm/_lib.py).
site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
if [ "$(cat "$site/ucm-checkout.pth" 2>/dev/null)" != "$PWD/lib/python" ]; then
  echo "deps: $site/ucm-checkout.pth -> $PWD/lib/python" >&2
  .venv/bin/python -m pip uninstall -q -y ucm 2>/dev/null || true   # an earlier `pip install -e`
  echo "$PWD/lib/python" > "$site/ucm-checkout.pth"
fi
