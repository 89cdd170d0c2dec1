#!/usr/bin/env bash
# Integration check of the token-ids route and the Python package against Hugging Face
# transformers (needs torch, so it stays out of .ci/run; docs/python.md reports its figures).
#
# On held-out documents (Debian licence texts and READMEs, never used to tune anything), with
# SmolLM2-135M-Instruct and configs/template_chat.txt:
#   1. the text route: `ucm precompute` from text (ucm's tokenizer);
#   2. the token-ids route: `python -m ucm.tokenize` with transformers' tokenizer, then precompute;
#   3. scripts/check_hf_cache.py: blocks a transformers-tokenizing server finds in each store, and
#      the stored K/V loaded through the ucm package into a transformers DynamicCache continuing to
#      transformers' own greedy tokens (top-1 >= 0.99, mean KL <= 1e-3 over 32 steps).
# Output: out/python_hf/{corpus.jsonl,ids.jsonl,report.json}. About 5 minutes after setup.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT_DIR:-out/python_hf}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct}
TEMPLATE=configs/template_chat.txt
BIN=${BUILD_DIR:-build}/bin/ucm
scripts/venv_torch.sh
[ -x "$BIN" ] || scripts/build.sh
[ -f "$MODEL/config.json" ] || .venv/bin/python scripts/fetch_model.py --out "$MODEL"
rm -rf "$OUT"; mkdir -p "$OUT"
# Held-out documents: whole READMEs, licences cut at 6000 characters (a 1.5K-token document).
.venv-torch/bin/python - "$OUT/corpus.jsonl" <<'PY'
import json, sys
from pathlib import Path
docs = [("LGPL-2.1", "/usr/share/common-licenses/LGPL-2.1", 6000),
        ("Apache-2.0", "/usr/share/common-licenses/Apache-2.0", 6000),
        ("GPL-3", "/usr/share/common-licenses/GPL-3", 6000),
        ("dbus-README.Debian", "/usr/share/doc/dbus/README.Debian", None),
        ("fontconfig-README.Debian", "/usr/share/doc/fontconfig/README.Debian", None),
        ("git-README.Debian", "/usr/share/doc/git/README.Debian", None)]
with open(sys.argv[1], "w") as f:
    for name, path, cut in docs:
        if Path(path).exists():
            f.write(json.dumps({"id": name, "text": Path(path).read_text()[:cut]}) + "\n")
PY
"$BIN" precompute --model "$MODEL" --corpus "$OUT/corpus.jsonl" --template "$TEMPLATE" --store "$OUT/text-store" >/dev/null
.venv-torch/bin/python -m ucm.tokenize --tokenizer "$MODEL" --template "$TEMPLATE" --corpus "$OUT/corpus.jsonl" \
  --out "$OUT/ids.jsonl"
"$BIN" tokenize --model "$MODEL" --template "$TEMPLATE" --corpus "$OUT/corpus.jsonl" --compare "$OUT/ids.jsonl" \
  > "$OUT/tokenize_compare.txt" || true
"$BIN" precompute --model "$MODEL" --corpus "$OUT/ids.jsonl" --store "$OUT/ids-store" >/dev/null
UCM_BIN="$BIN" UCM_LIB=${BUILD_DIR:-build}/lib/libucm.so .venv-torch/bin/python scripts/check_hf_cache.py \
  --model "$MODEL" --corpus "$OUT/corpus.jsonl" --template "$TEMPLATE" \
  --text-store "$OUT/text-store" --ids-store "$OUT/ids-store" --out "$OUT/report.json"
