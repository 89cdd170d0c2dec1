#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, ASan + UBSan) into build-fuzz/ and runs each
# one on a fresh copy of its seed directory. See docs/fuzzing.md.
#
#   scripts/fuzz.sh [--runs N | --seconds S] [TARGET...]
#
#   --runs N       executions per target (default 20000; -runs=N of libFuzzer)
#   --seconds S    time per target instead (-max_total_time=S)
#   --build-only   configure and build the targets, run nothing (scripts/test.sh builds them
#                  beside ctest this way, at the lowest priority)
#   TARGET         superblock data_file index_values meta_json tokenizer_load tokenizer_encode
#                  safetensors corpus (default: all)
#
# Prints one line per target (executions, exec/s, coverage, new units, crashes) and exits
# non-zero when a target crashes, times out (-timeout=5), leaks or breaks a contract check,
# printing the reproducer (build-fuzz/fuzz-artifacts/TARGET/...). Reproduce with
#   build-fuzz/fuzz/fuzz_TARGET REPRODUCER
# Installs clang and the libFuzzer runtime through apt when they are missing (the main setup,
# scripts/deps.sh, does not need them). Env: FUZZ_BUILD_DIR (build-fuzz), JOBS (2).
set -euo pipefail
cd "$(dirname "$0")/.."

ALL=(superblock data_file index_values meta_json tokenizer_load tokenizer_encode safetensors corpus)
RUNS=20000
SECS=""
BUILD_ONLY=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=$2; SECS=""; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --build-only) BUILD_ONLY=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "fuzz: unknown option $1" >&2; exit 2 ;;
    *)
      ok=0
      for t in "${ALL[@]}"; do [ "$t" = "$1" ] && ok=1; done
      [ $ok = 1 ] || { echo "fuzz: unknown target $1 (targets: ${ALL[*]})" >&2; exit 2; }
      targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${ALL[@]}")
BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-2}
TOKENIZER_JSON=models/SmolLM2-135M-Instruct/tokenizer.json

# --- clang and the libFuzzer runtime (libclang_rt.fuzzer), through apt when missing ---------
apt_install() {
  echo "fuzz: installing $*" >&2
  local sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "$@" >&2
}
if ! command -v clang >/dev/null || ! command -v clang++ >/dev/null; then apt_install clang; fi
if ! ls "$(clang++ -print-resource-dir)"/lib/linux/libclang_rt.fuzzer-*.a >/dev/null 2>&1; then
  ver=$(clang++ --version | sed -n 's/.*clang version \([0-9][0-9]*\).*/\1/p' | head -1)
  apt_install "libclang-rt-$ver-dev"  # Debian 12: clang-14's compiler-rt, with libFuzzer
fi

# --- configure and build ----------------------------------------------------------------------
mkdir -p "$BUILD"
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DUCM_FUZZ=ON -DUCM_WITH_TORCH=OFF -DUCM_CUDA=OFF \
  -DUCM_BUILD_TESTS=OFF -DUCM_WERROR=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
  >"$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log"; exit 1; }
build_targets=(fuzz_make_seeds)
for t in "${targets[@]}"; do build_targets+=("fuzz_$t"); done
nice -n 10 cmake --build "$BUILD" -j"$JOBS" --target "${build_targets[@]}" >"$BUILD/fuzz-build.log" 2>&1 \
  || { tail -50 "$BUILD/fuzz-build.log"; echo "fuzz: build failed (log: $BUILD/fuzz-build.log)" >&2; exit 1; }
[ "$BUILD_ONLY" = 1 ] && exit 0

# --- seeds ------------------------------------------------------------------------------------
# Checked-in seeds (tests/fuzz/corpus/TARGET) + the product encoders' (fuzz_make_seeds) + for the
# tokenizer loader, a trimmed copy of the real tokenizer.json (the whole file is 1.7 MB, too big
# to mutate quickly; it is run once as it is before fuzzing, see below).
rm -rf "$BUILD/fuzz-seeds" "$BUILD/fuzz-work"
"$BUILD/fuzz/fuzz_make_seeds" "$BUILD/fuzz-seeds"
prepare_work() {  # TARGET -> fresh working corpus
  local t=$1 w="$BUILD/fuzz-work/$1"
  mkdir -p "$w"
  [ -d "tests/fuzz/corpus/$t" ] && cp -r "tests/fuzz/corpus/$t/." "$w/"
  [ -d "$BUILD/fuzz-seeds/$t" ] && cp -r "$BUILD/fuzz-seeds/$t/." "$w/"
  # The stores that scripts/make_store_fixtures.py builds byte by byte from the spec.
  local f n
  for f in tests/fixtures/*/UCMSTORE; do
    [ "$t" = superblock ] && [ -f "$f" ] && cp "$f" "$w/fixture-$(basename "$(dirname "$f")")"
  done
  for f in tests/fixtures/*/data/*.ucmd; do
    [ "$t" = data_file ] && [ -f "$f" ] || continue
    n=$(basename "$(dirname "$(dirname "$f")")")-$(basename "$f" .ucmd)
    { printf '\000'; cat "$f"; } >"$w/fixture-$n"
    { printf '\001'; cat "$f"; } >"$w/fixture-$n-fix"
  done
  if [ "$t" = tokenizer_load ] && [ -f "$TOKENIZER_JSON" ]; then
    cp "$TOKENIZER_JSON" "$BUILD/fuzz-work/smollm2-tokenizer.json"
    python3 - "$TOKENIZER_JSON" "$w/smollm2-trimmed.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1], encoding="utf-8"))
m = j["model"]
keep = {t: i for t, i in m["vocab"].items() if i < 400}
merges = []
for mg in m["merges"]:
    a, b = mg.split(" ", 1) if isinstance(mg, str) else mg
    if a in keep and b in keep and a + b in keep:
        merges.append(mg)
m["vocab"], m["merges"] = keep, merges[:200]
j["added_tokens"] = [a for a in j["added_tokens"] if a["id"] < 400]
json.dump(j, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
EOF
  fi
}

# --- run --------------------------------------------------------------------------------------
mode=(-runs="$RUNS"); [ -n "$SECS" ] && mode=(-max_total_time="$SECS")
failed=0
printf '%-22s %10s %8s %14s %9s %8s %7s\n' target executions exec/s coverage new-units crashes time
for t in "${targets[@]}"; do
  bin="$BUILD/fuzz/fuzz_$t"
  art="$BUILD/fuzz-artifacts/$t"
  log="$BUILD/fuzz-logs/$t.log"
  mkdir -p "$art" "$(dirname "$log")"
  if [ "$t" = tokenizer_encode ] && [ ! -f "$TOKENIZER_JSON" ]; then
    printf '%-22s skipped: %s is missing (scripts/fetch_model.py)\n' "fuzz_$t" "$TOKENIZER_JSON"
    continue
  fi
  prepare_work "$t"
  export UCM_FUZZ_TOKENIZER_JSON="$PWD/$TOKENIZER_JSON"
  extra=()
  [ -f "tests/fuzz/dict/$t.dict" ] && extra+=(-dict="tests/fuzz/dict/$t.dict")
  start=$(date +%s%N)
  rc=0
  if [ "$t" = tokenizer_load ] && [ -f "$BUILD/fuzz-work/smollm2-tokenizer.json" ]; then
    # The real tokenizer.json, whole, once (libFuzzer caps mutated inputs at 1 MiB).
    rm -f "$log.real"
    nice -n 10 "$bin" -timeout=60 -artifact_prefix="$art/" "$BUILD/fuzz-work/smollm2-tokenizer.json" >"$log.real" 2>&1 \
      || { rc=$?; cat "$log.real" >"$log"; }
  fi
  if [ $rc = 0 ]; then
    nice -n 10 "$bin" "${mode[@]}" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$art/" \
      "${extra[@]}" "$BUILD/fuzz-work/$t" >"$log" 2>&1 || rc=$?
  fi
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  secs=$(( (ms + 500) / 1000 ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  eps="?"; [ -n "$execs" ] && eps=$(( execs * 1000 / (ms > 0 ? ms : 1) ))  # wall time, seeds included
  newu=$(sed -n 's/^stat::new_units_added: *//p' "$log" | tail -1)
  cov0=$(grep -m1 -o 'INITED cov: [0-9]*' "$log" | grep -o '[0-9]*$' || true)
  cov1=$(grep -o ' cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  crashes=0; [ $rc = 0 ] || crashes=1
  printf '%-22s %10s %8s %14s %9s %8s %6ss\n' "fuzz_$t" "${execs:-?}" "${eps:-?}" "${cov0:-?}->${cov1:-?}" \
    "${newu:-?}" "$crashes" "$secs"
  if [ $rc != 0 ]; then
    failed=1
    grep -E 'FUZZ CONTRACT VIOLATION|ERROR: (AddressSanitizer|UndefinedBehaviorSanitizer|LeakSanitizer|libFuzzer)|runtime error:|SUMMARY:|terminate called|what\(\):' \
      "$log" | head -8 | sed 's/^/    /'
    repro=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    [ -z "$repro" ] && [ -f "$log.real" ] && ! grep -q '^Executed' "$log.real" && repro="$BUILD/fuzz-work/smollm2-tokenizer.json"
    echo "    reproducer: ${repro:-none written} (run: $bin ${repro:-INPUT}; log: $log)"
  fi
done
exit $failed
