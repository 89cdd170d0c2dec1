#!/usr/bin/env bash
# Prefill throughput of ucm against the engines a platform team would otherwise use, on the same
# machine, the same documents and in one run (docs/benchmarks.md, "prefill: side by side").
#
#   scripts/bench_prefill.sh [--docs N] [--max-doc-tokens N] [--rounds N] [--out DIR] [--isa ISA]
#
# --rounds N (3): `ucm bench precompute --rounds`: full precompute and bare prefill alternated N
# times, the full/bare ratio that of the medians (one round moves by +-15% on a shared machine).
#
# --isa avx512_core_bf16: caps oneDNN (libtorch's, and so every engine's bf16 GEMMs) at that ISA
# through ONEDNN_MAX_CPU_ISA, which stands for a CPU with AVX512-BF16 but no AMX (Cooper Lake,
# Zen 4) on an AMX machine; ucm's fused kernels use AVX512-BF16 only either way.
#
# Documents: the first N (24) of the default corpus (Debian's python3.11-doc sources, the chat
# template of configs/), tokenized once by `ucm tokenize` and cut at 512 tokens (whole blocks),
# written as a token-ids corpus that every engine reads:
#   ucm bench precompute   bare prefill and full precompute (compute bf16 and fp32, store bf16;
#                          bf16 once more with UCM_BF16_KERNELS=0: libtorch's ops, the fallback)
#   vLLM CPU build         .venv-vllm (scripts/venv_vllm.sh): max_tokens=1, prefix caching off
#   transformers           .venv-torch (scripts/venv_torch.sh)
#   matmul limit           torch.matmul GFLOP/s of the model's MLP shape, fp32 and bf16, and the
#                          prefill tokens/s that bounds (2 FLOPs per parameter per token)
#   fp32 GEMM routes       bench_gemm (tests/model, built here if missing): the model's GEMMs
#                          through OpenBLAS and through oneDNN (libtorch's mkldnn_linear), one
#                          thread and every core; printed after the table, kept in DIR/gemm.txt
# An engine whose venv is missing is reported as skipped. Output: DIR/prefill.json and a
# markdown table on stdout, with the CPU model.
set -uo pipefail
cd "$(dirname "$0")/.."
DOCS=24
CUT=512
ROUNDS=3
OUT=out/bench_prefill
while [ $# -gt 0 ]; do
  case "$1" in
    --docs) DOCS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --max-doc-tokens) CUT=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --isa) export ONEDNN_MAX_CPU_ISA=${2^^} DNNL_MAX_CPU_ISA=${2^^}; shift 2 ;;
    -h|--help) sed -n 2,27p "$0"; exit 0 ;;
    *) echo "bench_prefill: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
UCM=${UCM_BIN:-build/bin/ucm}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct}
CORPUS=/usr/share/doc/python3.11/html/_sources
[ -x "$UCM" ] || { echo "bench_prefill: no $UCM (run scripts/build.sh)" >&2; exit 1; }
[ -f "$MODEL/config.json" ] || { echo "bench_prefill: no model at $MODEL (scripts/fetch_model.py)" >&2; exit 1; }
mkdir -p "$OUT"
IDS=$OUT/ids.jsonl
"$UCM" tokenize --model "$MODEL" --template configs/template_chat.txt --corpus "$CORPUS" \
  --corpus-suffix .rst.txt --limit "$DOCS" >"$OUT/ids_full.jsonl" || exit 1
python3 - "$OUT/ids_full.jsonl" "$IDS" "$CUT" <<'PY'
import json, sys
src, dst, cut = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(dst, "w") as f:
    for line in open(src):
        e = json.loads(line)
        ids = e["token_ids"][:cut]
        ids = ids[: len(ids) - len(ids) % 16]
        if ids:
            f.write(json.dumps({"id": e["id"], "token_ids": ids}) + "\n")
PY
PARAMS=$(python3 -c "
import json; c = json.load(open('$MODEL/config.json'))
h, i, L, v = c['hidden_size'], c['intermediate_size'], c['num_hidden_layers'], c['vocab_size']
hd = c.get('head_dim', h // c['num_attention_heads'])
q, kv = c['num_attention_heads'] * hd, c['num_key_value_heads'] * hd
print(L * (h * (q + 2 * kv) + q * h + 3 * h * i))")  # matmul parameters per token (no embedding)
RES=$OUT/results.jsonl
: >"$RES"
run() {  # name, command...
  local name=$1; shift
  echo "bench_prefill: $name" >&2
  if out=$("$@" 2>"$OUT/$name.stderr.txt"); then
    # The report: the whole output (ucm pretty-prints it) or its last line (vLLM logs before it).
    echo "$out" | python3 -c "
import json, sys
t = sys.stdin.read().strip()
try:
    d = json.loads(t)
except ValueError:  # the last line that is a JSON object (vLLM logs its shutdown after it)
    d = next(json.loads(l) for l in reversed(t.splitlines()) if l.startswith('{'))
d['name'] = '$name'
print(json.dumps(d))" >>"$RES"
  else
    echo "{\"name\": \"$name\", \"error\": $(tail -c 400 "$OUT/$name.stderr.txt" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')}" >>"$RES"
  fi
}
for ct in bf16 fp32; do  # compute dtype (--compute-dtype); the store holds bf16 either way
  run "ucm-$ct" "$UCM" bench precompute --model "$MODEL" --corpus "$IDS" --template "" --docs "$DOCS" \
    --max-doc-tokens "$CUT" --dtype bf16 --compute-dtype "$ct" --rounds "$ROUNDS" --json
done
# ucm's fp32 GEMMs are OpenBLAS's: where the environment sets OPENBLAS_CORETYPE (some machines set
# Haswell on AVX-512 CPUs), ucm-torch replaces a core the CPU outgrows in its own process (the row
# above; its report says so in blas_core_replaced), so fp32 runs once more with the environment's
# core kept (UCM_BLAS_CORE=keep) and once with OpenBLAS's own choice: what the replacement is worth.
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
  UCM_BLAS_CORE=keep run "ucm-fp32-environment-core-kept" "$UCM" bench precompute --model "$MODEL" --corpus "$IDS" \
    --template "" --docs "$DOCS" --max-doc-tokens "$CUT" --dtype bf16 --compute-dtype fp32 --rounds "$ROUNDS" --json
  run "ucm-fp32-openblas-own-core" env -u OPENBLAS_CORETYPE "$UCM" bench precompute --model "$MODEL" --corpus "$IDS" \
    --template "" --docs "$DOCS" --max-doc-tokens "$CUT" --dtype bf16 --compute-dtype fp32 --rounds "$ROUNDS" --json
fi
# fp32's fused kernels capped at AVX2 (a CPU without AVX-512), and off (UCM_FP32_KERNELS=0: the fp32
# path before them, libtorch's ops on one thread beside OpenBLAS's threads): before/after in one run.
for k in avx2 0; do
  UCM_FP32_KERNELS=$k run "ucm-fp32-kernels-$k" "$UCM" bench precompute --model "$MODEL" --corpus "$IDS" --template "" \
    --docs "$DOCS" --max-doc-tokens "$CUT" --dtype bf16 --compute-dtype fp32 --rounds "$ROUNDS" --json
done
UCM_BF16_KERNELS=0 run "ucm-bf16-libtorch-ops" "$UCM" bench precompute --model "$MODEL" --corpus "$IDS" --template "" \
  --docs "$DOCS" --max-doc-tokens "$CUT" --dtype bf16 --compute-dtype bf16 --json
for dt in bfloat16 float32; do
  if [ -x .venv-vllm/bin/python ]; then run "vllm-$dt" .venv-vllm/bin/python scripts/bench_prefill_engines.py vllm --model "$MODEL" --ids "$IDS" --dtype "$dt"
  else echo "{\"name\": \"vllm-$dt\", \"error\": \"skipped: no .venv-vllm (scripts/venv_vllm.sh)\"}" >>"$RES"; fi
  if [ -x .venv-torch/bin/python ]; then
    run "hf-$dt" .venv-torch/bin/python scripts/bench_prefill_engines.py hf --model "$MODEL" --ids "$IDS" --dtype "$dt"
    run "matmul-$dt" .venv-torch/bin/python scripts/bench_prefill_engines.py matmul --dtype "$dt" --params "$PARAMS"
  else echo "{\"name\": \"hf-$dt\", \"error\": \"skipped: no .venv-torch (scripts/venv_torch.sh)\"}" >>"$RES"; fi
done
python3 - "$RES" "$OUT/prefill.json" <<'PY'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
flags = open("/proc/cpuinfo").read()
isa = [f for f in ("amx_bf16", "avx512_bf16", "avx512f", "avx2") if f" {f}" in flags]
cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "")
core = os.environ.get("OPENBLAS_CORETYPE", "")
json.dump({"cpu": cpu, "isa": isa, "onednn_max_cpu_isa": cap, "openblas_coretype": core, "rows": rows},
          open(sys.argv[2], "w"), indent=1)
print(f"CPU: {cpu} ({', '.join(isa)})" + (f"; oneDNN capped at {cap} (ONEDNN_MAX_CPU_ISA)" if cap else "")
      + (f"; OPENBLAS_CORETYPE={core} in the environment" if core else "") + "\n")
print("| engine | dtype | prefill tokens/s | note |")
print("|---|---|---|---|")
for r in rows:
    if "error" in r:
        print(f"| {r['name']} | | | {r['error'][:120]} |")
    elif r["name"].startswith("ucm"):
        blas = f", OpenBLAS {r['blas_core']}" if r.get("blas_core") else ""
        if r.get("blas_core_replaced"): blas += f" (environment's {r['blas_core_replaced']} replaced)"
        lim = (f"; GEMMs {r['gemm_gflops']:.0f} GFLOP/s, {r['limit_ratio']:.2f} of the {r['matmul_limit_gflops']:.0f} GFLOP/s limit"
               if r.get("matmul_limit_gflops") else "")
        print(f"| ucm bench precompute, bare prefill | compute {r.get('compute_dtype', '?')} ({r.get('compute_path', '?')}, {r.get('kernels', '?')} kernels, {r.get('threads', '?')} threads{blas}), store bf16 | {r['prefill_tokens_per_second']:.1f} | {r['tokens']} tokens, {r['batches']} batches{lim} |")
        per = ", ".join(f"{x:.3f}" for x in r.get("ratios", []))
        print(f"| ucm bench precompute, full precompute | compute {r.get('compute_dtype', '?')} | {r['precompute_tokens_per_second']:.1f} | ratio {r['ratio']:.3f} (medians of {r.get('rounds', 1)} rounds; per round {per}) |")
    elif r["engine"] == "matmul":
        print(f"| matmul limit ({r['gflops']:.0f} GFLOP/s) | {r['dtype']} | {r.get('tokens_per_second_bound', 0):.0f} | bound at 2 FLOPs/param/token |")
    else:
        print(f"| {r['engine']} {r.get('version', '')} | {r['dtype']} | {r['tokens_per_second']:.1f} | {r['tokens']} tokens in {r['seconds']:.2f} s |")
PY

# fp32 GEMMs: OpenBLAS (what ucm's fp32 path runs) against oneDNN through libtorch, the model's
# shapes, one thread (each prefill worker's) and every core.
BUILD_DIR=${BUILD_DIR:-build}
if [ -x "$BUILD_DIR/tests/model/bench_gemm" ] || cmake --build "$BUILD_DIR" --target bench_gemm >/dev/null 2>&1; then
  {
    echo; echo "fp32 GEMM routes (bench_gemm), 1 thread:"
    OPENBLAS_NUM_THREADS=1 "$BUILD_DIR/tests/model/bench_gemm" "" 1
    echo; echo "fp32 GEMM routes (bench_gemm), $(nproc) threads:"
    OPENBLAS_NUM_THREADS=$(nproc) "$BUILD_DIR/tests/model/bench_gemm" "" "$(nproc)"
  } 2>&1 | tee "$OUT/gemm.txt"
else
  echo "bench_prefill: bench_gemm could not be built (cmake --build $BUILD_DIR --target bench_gemm): GEMM routes skipped" >&2
fi
