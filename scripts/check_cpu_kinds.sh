#!/usr/bin/env bash
# scripts/check_cpu_kinds.sh: run ucm's model path on CPUs this machine is not, under QEMU's user
# mode emulation (qemu-x86_64 -cpu MODEL: CPUID says what that CPU has; an instruction it lacks
# is SIGILL), and check what it wrote against this machine's own recompute.
#
#   scripts/check_cpu_kinds.sh [--cpus "Nehalem-v2 Haswell-v4"] [--build DIR]
#
# For each CPU model:
#   1. the fp32 kernels' tests (tests/model/test_fp32_kernels, less the two that run the
#      135M model) and the bf16 kernels' (test_bf16_kernels: its portable path);
#   2. the tiny Llama 3 / Qwen / Mistral checkpoints of tests/golden/families against
#      transformers' K/V (test_family_parity: single sequences and padded batches);
#   3. `ucm-torch precompute` of two Python 3.11 documents with tests/golden/families/llama3,
#      whose report must name the kernels that CPU gets (Nehalem-v2: fp32_generic and an OpenBLAS
#      core without AVX2; Haswell-v4: fp32_avx2, OpenBLAS Haswell), then natively
#      `ucm inspect --verify` and `ucm inspect --audit --all` (every block recomputed on this CPU:
#      honest within the audit's tolerance).
# Nehalem-v2 is an x86-64 without AVX (the generic kernels, libtorch's default CPU capability);
# Haswell-v4 has AVX2 and FMA but no AVX-512 (the AVX2 kernels). QEMU 7.2's TCG emulates no
# AVX-512 at all, so the Skylake-SP kind (AVX-512 without AVX512-BF16) cannot be run this way:
# tests/isa/check_isa_confinement.sh checks, on the linked binaries, that no AVX512-BF16
# instruction lies outside cpu::hw (run only where CPUID has avx512_bf16).
#
# Emulation is slow (TCG runs SSE code some 15-30x and AVX2 code some 250-700x slower than this
# CPU runs its AVX-512 path): 7 min 16 s in all on the 2-core development machine (Intel Xeon
# with AMX, 2026-12-02), 33 s of it for Nehalem-v2. Not part of scripts/test.sh. Exit 0 when every step passes, 1 when
# one fails, 2 when something needed is missing.
set -uo pipefail
cd "$(dirname "$0")/.."

cpus="Nehalem-v2 Haswell-v4"
build=build
while [ $# -gt 0 ]; do
  case "$1" in
    --cpus) cpus="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check_cpu_kinds.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

need() { [ -e "$1" ] || { echo "check_cpu_kinds.sh: $1 missing: $2" >&2; exit 2; }; }
if ! command -v qemu-x86_64 >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -qq qemu-user >/dev/null || { echo "check_cpu_kinds.sh: apt-get install qemu-user failed" >&2; exit 2; }
  else
    echo "check_cpu_kinds.sh: qemu-x86_64 not found: install Debian's qemu-user" >&2
    exit 2
  fi
fi
torch_bin=$build/libexec/ucm/ucm-torch
need "$torch_bin" "build it first (scripts/test.sh builds every target)"
need "$build/bin/ucm" "build it first"
need "$build/tests/model/test_fp32_kernels" "build the tests first (scripts/test.sh)"
need "$build/tests/model/test_bf16_kernels" "build the tests first (scripts/test.sh)"
need "$build/tests/model/test_family_parity" "build the tests first (scripts/test.sh)"
model=tests/golden/families/llama3
docs=/usr/share/doc/python3.11/html/_sources/library
need "$docs/keyword.rst.txt" "Debian's python3.11-doc (scripts/deps.sh installs it)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
cp "$docs/keyword.rst.txt" "$docs/nis.rst.txt" "$work/corpus/"

failed=0
summary=()
step() {  # step CPU NAME COMMAND...: run, time, record
  local cpu=$1 name=$2 t0 rc
  shift 2
  t0=$(date +%s)
  "$@" >"$work/log" 2>&1
  rc=$?
  local secs=$(($(date +%s) - t0))
  if [ $rc -eq 0 ]; then
    summary+=("$cpu | $name | ok | ${secs} s")
  else
    summary+=("$cpu | $name | FAILED (exit $rc) | ${secs} s")
    failed=1
    echo "---- $cpu, $name: exit $rc; the last lines:" >&2
    grep -v "TCG doesn't support" "$work/log" | tail -25 >&2
  fi
  echo "$cpu: $name: exit $rc in ${secs} s" >&2
}
emu() { local cpu=$1; shift; qemu-x86_64 -cpu "$cpu" "$@"; }

precompute_and_audit() {  # CPU EXPECTED_KERNELS
  local cpu=$1 want=$2 store=$work/store-$1
  emu "$cpu" "$torch_bin" precompute --model "$model" --corpus "$work/corpus" --store "$store" --compute-dtype fp32 \
    --json >"$work/pre.json" 2>"$work/pre.err" || { cat "$work/pre.err"; return 1; }
  python3 - "$work/pre.json" "$want" <<'EOF' || return 1
import json, sys
r = json.load(open(sys.argv[1])); want = sys.argv[2]
print("report: kernels", r["kernels"], "blas_core", r["blas_core"], "tokens", r["tokens"], "blocks", r["blocks_written"])
ok = r["blocks_written"] > 0 and (not want or r["kernels"] == want)
if want == "fp32_generic":
    ok = ok and r["blas_core"] not in ("Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids")
if want == "fp32_avx2":
    ok = ok and r["blas_core"] in ("Haswell", "Zen")
sys.exit(0 if ok else 1)
EOF
  "$build/bin/ucm" inspect "$store" --verify || return 1
  "$build/bin/ucm" inspect "$store" --audit --all --model "$model" --json >"$work/audit.json" || return 1
  python3 - "$work/audit.json" <<'EOF'
import json, sys
a = json.load(open(sys.argv[1]))
print("audit: audited", a["audited"], "honest", a["honest"], "max deviation", a["max_honest_deviation"])
sys.exit(0 if a["audited"] > 0 and a["honest"] == a["audited"] == a["blocks_in_namespace"] else 1)
EOF
}

for cpu in $cpus; do
  case "$cpu" in
    Nehalem*|Westmere*|Conroe*|Penryn*|core2duo|qemu64) want=fp32_generic ;;
    Haswell*|Broadwell*|Skylake-Client*|EPYC*) want=fp32_avx2 ;;  # TCG drops the AVX-512 of the -Server models
    *) want="" ;;
  esac
  step "$cpu" "fp32 kernel tests" emu "$cpu" "$build/tests/model/test_fp32_kernels" \
    --gtest_filter='-*PrefillWorkersGiveTheOneThreadResultBitForBit:*GemmRowRangesGiveTheWholeGemmsBits'
  step "$cpu" "bf16 kernel tests (portable path)" emu "$cpu" "$build/tests/model/test_bf16_kernels"
  step "$cpu" "family parity with transformers" emu "$cpu" "$build/tests/model/test_family_parity" \
    --gtest_filter='*SingleSequencesMatchTransformers*:*PaddedBatchMatchesTransformers*'
  step "$cpu" "precompute there, verify and audit here${want:+ (kernels $want)}" precompute_and_audit "$cpu" "$want"
  grep -E '^(report|audit):' "$work/log" | sed "s/^/$cpu: /" >&2
done

echo
echo "| CPU model (qemu-x86_64 -cpu) | step | result | time |"
echo "|---|---|---|---|"
for line in "${summary[@]}"; do echo "| $line |"; done
exit $failed
