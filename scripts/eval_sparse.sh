#!/usr/bin/env bash
# Sparse decode against dense decode on real prompts: for each document (a stored corpus document
# with a question appended) and each policy, runs `ucm generate --sparse POLICY --json` and
# collects the teacher-forced top-1 agreement, the mean KL of the next-token distributions and
# the greedy exact-match prefix over NEW tokens into a CSV (stdout), with the mean per policy on
# stderr. Used for the table in docs/retrieval.md ("Sparse decode").
#
#   scripts/eval_sparse.sh [STORE] [DOC...]
#     STORE   default stores/python311-doc (scripts/setup.sh builds it)
#     DOC     corpus-relative files under $CORPUS (default: 10 documents of 1.1K-6.4K tokens)
#   env: CORPUS (/usr/share/doc/python3.11/html/_sources), POLICIES ("esa quest gsa psa"),
#        NEW (32), RETRIEVAL_CONFIG (default: the library defaults), UCM (build/bin/ucm)
set -euo pipefail
cd "$(dirname "$0")/.."
STORE=${1:-stores/python311-doc}
shift || true
CORPUS=${CORPUS:-/usr/share/doc/python3.11/html/_sources}
POLICIES=${POLICIES:-esa quest gsa psa}
NEW=${NEW:-32}
UCM=${UCM:-build/bin/ucm}
DOCS=("$@")
[ ${#DOCS[@]} -gt 0 ] || DOCS=(bugs.rst.txt c-api/buffer.rst.txt c-api/bytes.rst.txt c-api/call.rst.txt
  c-api/capsule.rst.txt c-api/code.rst.txt c-api/codec.rst.txt c-api/complex.rst.txt
  c-api/contextvars.rst.txt c-api/conversion.rst.txt)
QUESTION=$'\n\nIn two sentences, what is this page about?<|im_end|>\n<|im_start|>assistant\n'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
extra=()
[ -n "${RETRIEVAL_CONFIG:-}" ] && extra=(--retrieval-config "$RETRIEVAL_CONFIG")
echo "doc,prompt_tokens,context_blocks,policy,selected_fraction,top1_agreement,mean_kl,greedy_match,steps"
for doc in "${DOCS[@]}"; do
  { cat "$CORPUS/$doc"; printf '%s' "$QUESTION"; } >"$tmp/prompt.txt"
  for p in $POLICIES; do
    "$UCM" generate --json --ignore-eos --no-recompute --max-new-tokens "$NEW" --model models/SmolLM2-135M-Instruct \
      --store "$STORE" --template configs/template_chat.txt --prompt-file "$tmp/prompt.txt" --sparse "$p" \
      "${extra[@]}" >"$tmp/out.json" 2>"$tmp/err.txt" || { cat "$tmp/err.txt" >&2; exit 1; }
    python3 - "$doc" "$tmp/out.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[2])); s = j["sparse"]
print(f'{sys.argv[1]},{j["prompt_tokens"]},{s["context_blocks"]},{s["policy"]},{s["mean_selected_fraction"]:.4f},'
      f'{s["top1_agreement"]:.4f},{s["mean_kl"]:.5f},{s["greedy_match"]},{s["steps"]}')
PY
  done
done | tee "$tmp/rows.csv"
python3 - "$tmp/rows.csv" >&2 <<'PY'
import csv, sys, collections
acc = collections.defaultdict(list)
for r in csv.reader(open(sys.argv[1])): acc[r[3]].append(r)
print("policy  docs  selected  top1_agreement  mean_kl  greedy_match(mean)")
for p, rows in acc.items():
    m = lambda i: sum(float(r[i]) for r in rows) / len(rows)
    print(f"{p:6s}  {len(rows):4d}  {m(4):8.3f}  {m(5):14.3f}  {m(6):7.4f}  {m(7):6.1f}")
PY
