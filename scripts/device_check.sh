#!/usr/bin/env bash
# The one-shot GPU check on a lent device machine (docs/device.md): builds ucm with CUDA against
# the carried Debian libraries (.device/, scripts/fetch_device_debs.sh) and the machine's PyTorch,
# runs the GPU tests, the benchmarks, and GPU precompute against CPU precompute on 5 real documents.
#
#   bash scripts/device_check.sh          # $OUT: where results go (default out/device)
#
# Steps (each timed, each under its own timeout, all within UCM_DEVICE_BUDGET_S):
#   info            nvidia-smi, nvcc, PyTorch and its CUDA, glibc, the OS
#   prefix          .device/prefix (unpacked from .device/debs when missing), LD_LIBRARY_PATH,
#                   the glibc / libstdc++ the carried libraries need against the machine's
#   configure       Release build in build-device/ (CUDA, tests; Werror off)
#   build           the targets of UCM_DEVICE_TARGETS, -j$(nproc)
#   test_gpu        ctest -L gpu
#   vllm_layouts    the vLLM connector's GPU load and save path (ucm.vllm.gpu_layout) on CUDA tensors
#                   built as vLLM 0.32's backends build them, bit-exact (scripts/device_vllm_layouts.py)
#   bench_kernels   ucm bench kernels --json
#   model           a small Llama of the default model's shapes (scripts/make_device_model.py)
#   precompute_gpu  ucm precompute --device cuda of .device/data/corpus5.jsonl
#   precompute_cpu  ucm precompute of the same
#   compare         scripts/compare_stores.py: same block hashes, K/V within 1 bf16 ulp
#   bench_store     ucm bench store --device 0 --json
#   bench_precompute ucm bench precompute (--device cuda where it exists) --json
#   test_kernels    ctest -L kernels (the host-run kernel tests)
# The order puts what only a GPU can tell first. A step that fails is recorded and the next runs;
# $OUT/summary.json is rewritten after every step and on exit, whatever happens.
#
# Output in $OUT: device_check.log (everything), steps/<step>.log, summary.json, bench_*.json,
# ctest_*.log, compare.json, precompute_*.json, vllm_layouts.json.
#
# Environment:
#   UCM_DEVICE_BUDGET_S   whole-run budget in seconds (default 450: done in under 8 minutes)
#   UCM_DEVICE_TIMEOUT_<STEP>  one step's timeout (e.g. UCM_DEVICE_TIMEOUT_BUILD=300)
#   UCM_DEVICE_STEPS      comma-separated steps to run (default: all)
#   UCM_DEVICE_DRY=1      info, prefix and configure only (automatic where nvidia-smi is absent)
#   UCM_DEVICE_TARGETS    build targets (default below)
#   UCM_DEVICE_BUILD      build directory (default build-device)
#   UCM_CUDA_ARCH         CMAKE_CUDA_ARCHITECTURES (default native; 90 on a failed configure)
#   UCM_BENCH_STORE_ARGS  extra arguments of bench store (default: --blocks 4096 --lookup-blocks 0)
#   UCM_PRECOMPUTE_GPU_ARGS  what makes precompute use the GPU (default: --device cuda)
#   PYTHON                the Python with torch and numpy (default python3)
#   UCM_VLLM_LAYOUTS_DEVICE  device of step vllm_layouts (default cuda; cpu with UCM_CUDA_PLUGIN naming
#                         the stand-in plugin is its dry run on a CPU machine)
#   UCM_DEVICE_PACK=1     on exit, pack $OUT into $OUT/all.tgz, leaving it, summary.json and
#                         bench_kernels.json (the device tool returns only a few files)
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${OUT:-$REPO/out/device}
mkdir -p "$OUT/steps"
OUT=$(cd "$OUT" && pwd)
LOG=$OUT/device_check.log
: >"$LOG"
BUILD=${UCM_DEVICE_BUILD:-build-device}
case "$BUILD" in /*) ;; *) BUILD=$REPO/$BUILD ;; esac
DEV=$REPO/.device
PFX=$DEV/prefix
ARCH_TRIPLET=x86_64-linux-gnu
PY=${PYTHON:-python3}
LDCONFIG=$(command -v ldconfig || echo /sbin/ldconfig)
BUDGET=${UCM_DEVICE_BUDGET_S:-450}
T0=$(date +%s)
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
DEFAULT_TARGETS="ucm ucm_cli ucm_torch_cli ucm_cuda test_kernels_gpu test_kernels_host test_device_load test_device_absent ucm_fake_cuda_plugin"
TARGETS=${UCM_DEVICE_TARGETS:-$DEFAULT_TARGETS}
export OUT REPO BUILD DEV PFX PY

DRY=${UCM_DEVICE_DRY:-}
if [ -z "$DRY" ]; then
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then DRY=0; else DRY=1; fi
fi
ALL_STEPS="info,prefix,configure,build,test_gpu,vllm_layouts,bench_kernels,model,precompute_gpu,precompute_cpu,compare,bench_store,bench_precompute,test_kernels"
[ "$DRY" = 1 ] && ALL_STEPS="info,prefix,configure"
STEPS=",${UCM_DEVICE_STEPS:-$ALL_STEPS},"

say() { echo "device_check: $*" | tee -a "$LOG"; }
elapsed() { echo $(( $(date +%s) - T0 )); }

# ---- the record: one entry per step, summary.json rewritten after each ----
S_NAME=(); S_STATUS=(); S_RC=(); S_SECS=(); S_LIMIT=(); S_NOTE=()
declare -A ENVINFO=()
json_str() {  # a JSON string literal
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}; s=${s//$'\n'/\\n}; s=${s//$'\t'/ }; s=${s//$'\r'/}
  printf '"%s"' "$(printf '%s' "$s" | tr -d '\000-\010\013\014\016-\037')"
}
write_summary() {
  local i ok=true k first=1
  for i in "${!S_NAME[@]}"; do
    case "${S_STATUS[$i]}" in ok|warning|skipped|no_tests) ;; *) ok=false ;; esac
  done
  {
    printf '{\n  "started": %s,\n  "host": %s,\n  "dry": %s,\n' "$(json_str "$STARTED")" \
      "$(json_str "$(hostname 2>/dev/null)")" "$([ "$DRY" = 1 ] && echo true || echo false)"
    printf '  "budget_s": %s,\n  "elapsed_s": %s,\n  "ok": %s,\n  "env": {' "$BUDGET" "$(elapsed)" "$ok"
    for k in $(printf '%s\n' "${!ENVINFO[@]}" | sort); do
      [ $first = 1 ] || printf ','
      first=0
      printf '\n    %s: %s' "$(json_str "$k")" "$(json_str "${ENVINFO[$k]}")"
    done
    printf '\n  },\n  "steps": ['
    for i in "${!S_NAME[@]}"; do
      [ "$i" -gt 0 ] && printf ','
      printf '\n    {"name": %s, "status": %s, "rc": %s, "seconds": %s, "timeout_s": %s, "note": %s, "log": %s}' \
        "$(json_str "${S_NAME[$i]}")" "$(json_str "${S_STATUS[$i]}")" "${S_RC[$i]}" "${S_SECS[$i]}" \
        "${S_LIMIT[$i]}" "$(json_str "${S_NOTE[$i]}")" "$(json_str "steps/${S_NAME[$i]}.log")"
    done
    printf '\n  ],\n  "files": ['
    first=1
    for k in $(cd "$OUT" && ls -1 ./*.json ./*.log ./*.xml 2>/dev/null | sed 's#^\./##' | grep -v '^summary.json$'); do
      [ $first = 1 ] || printf ','
      first=0
      printf '\n    %s' "$(json_str "$k")"
    done
    printf '\n  ]\n}\n'
  } >"$OUT/summary.json.tmp" && mv "$OUT/summary.json.tmp" "$OUT/summary.json"
}
record() {  # name status rc seconds limit note
  S_NAME+=("$1"); S_STATUS+=("$2"); S_RC+=("$3"); S_SECS+=("$4"); S_LIMIT+=("$5"); S_NOTE+=("$6")
  say "$(printf '%-17s %-8s rc=%-4s %4ss  %s' "$1" "$2" "$3" "$4" "$6")"
  write_summary
}
on_exit() {
  write_summary
  say "total $(elapsed)s of a ${BUDGET}s budget; summary: $OUT/summary.json"
  # The device tool brings back only a few files: UCM_DEVICE_PACK=1 leaves summary.json,
  # bench_kernels.json and all.tgz (everything, steps/ included) in $OUT.
  if [ "${UCM_DEVICE_PACK:-0}" = 1 ]; then
    local tmp
    tmp=$(mktemp -d)
    (cd "$OUT" && tar czf "$tmp/all.tgz" . && cp -f summary.json "$tmp/" && { cp -f bench_kernels.json "$tmp/" 2>/dev/null || true; } &&
      find . -mindepth 1 -delete && mv "$tmp"/* . && rmdir "$tmp")
  fi
}
trap on_exit EXIT
trap 'say "interrupted"; exit 130' INT TERM

status_of() {  # a step's recorded status
  local i
  for i in "${!S_NAME[@]}"; do [ "${S_NAME[$i]}" = "$1" ] && { echo "${S_STATUS[$i]}"; return; }; done
  echo none
}

# run_step NAME DEFAULT_TIMEOUT FUNCTION: runs FUNCTION in a child bash under timeout (capped by
# what is left of the budget), its output in steps/NAME.log and device_check.log. FUNCTION may
# write a one-line note to $OUT/steps/NAME.note and exit 3 for "skipped", 4 for "no tests", 5 for
# "warning" (done, but not fully: e.g. configured without torch).
run_step() {
  local name=$1 def=$2 fn=$3 var limit left t1 rc status note
  case "$STEPS" in *",$name,"*) ;; *) return 0 ;; esac
  var=UCM_DEVICE_TIMEOUT_$(echo "$name" | tr '[:lower:]' '[:upper:]')
  limit=${!var:-$def}
  left=$(( BUDGET - $(elapsed) - 5 ))
  if [ "$left" -lt 10 ]; then
    record "$name" skipped 0 0 0 "no time left in the ${BUDGET}s budget"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  rm -f "$OUT/steps/$name.note"
  say "--- $name (timeout ${limit}s, $(elapsed)s elapsed)"
  t1=$(date +%s)
  {
    echo "### $name: $fn, timeout ${limit}s, $(date -u +%H:%M:%SZ)"
    STEP_NAME=$name timeout -k 10 "$limit" bash -c "$fn" 2>&1
    echo "### rc=$?"
  } >"$OUT/steps/$name.log" 2>&1
  rc=$(tail -1 "$OUT/steps/$name.log" | sed -n 's/^### rc=//p')
  rc=${rc:-1}
  cat "$OUT/steps/$name.log" >>"$LOG"
  note=$(head -c 400 "$OUT/steps/$name.note" 2>/dev/null | tr '\n' ' ')
  case "$rc" in
    0) status=ok ;;
    3) status=skipped ;;
    4) status=no_tests ;;
    5) status=warning ;;
    124|137) status=timeout; note="timed out after ${limit}s${note:+; $note}" ;;
    *) status=failed
       [ -n "$note" ] || note=$(grep -v '^###' "$OUT/steps/$name.log" | grep -v '^\s*$' | tail -1 | head -c 300) ;;
  esac
  record "$name" "$status" "$rc" $(( $(date +%s) - t1 )) "$limit" "$note"
}
note() { echo "$*" >"$OUT/steps/${STEP_NAME}.note"; }
export -f note

# ---- a. the machine ----
step_info() {
  local t1 v
  case "$STEPS" in *",info,"*) ;; *) return 0 ;; esac
  t1=$(date +%s)
  {
    echo "### info"
    echo "## nvidia-smi"; timeout 20 nvidia-smi 2>&1 || echo "(nvidia-smi: unavailable)"
    echo "## nvcc"; timeout 20 nvcc --version 2>&1 || timeout 20 /usr/local/cuda/bin/nvcc --version 2>&1 || echo "(nvcc: not found)"
    echo "## python/torch"
    timeout 60 "$PY" -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "cxx11_abi", torch._C._GLIBCXX_USE_CXX11_ABI); print("cmake_prefix_path", torch.utils.cmake_prefix_path); print("device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")' 2>&1 ||
      echo "(torch: not importable with $PY)"
    echo "## glibc"; ldd --version 2>&1 | head -1
    echo "## os"; cat /etc/os-release 2>/dev/null | head -4; uname -a
    echo "## tools"; for t in cmake ctest ninja make gcc g++ pkg-config dpkg-deb ar xz; do
      printf '%-10s %s\n' "$t" "$(command -v $t >/dev/null && ($t --version 2>/dev/null | head -1) || echo '-')"; done
    echo "## cpus $(nproc), memory $(free -g 2>/dev/null | awk '/Mem:/ {print $2 " GiB"}')"
  } >"$OUT/steps/info.log" 2>&1
  cat "$OUT/steps/info.log" >>"$LOG"
  ENVINFO[gpu]=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader 2>/dev/null | head -1)
  ENVINFO[nvcc]=$(grep -o 'release [0-9.]*' "$OUT/steps/info.log" | head -1)
  ENVINFO[torch]=$(sed -n 's/^torch //p' "$OUT/steps/info.log" | head -1)
  ENVINFO[python]=$(sed -n 's/^python //p' "$OUT/steps/info.log" | head -1)
  ENVINFO[glibc]=$(ldd --version 2>&1 | head -1 | grep -oE '[0-9]+\.[0-9]+$')
  ENVINFO[os]=$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-?}")
  ENVINFO[cpus]=$(nproc)
  ENVINFO[cmake]=$(cmake --version 2>/dev/null | head -1 | grep -oE '[0-9][0-9.]*')
  v=$(sed -n 's/^cmake_prefix_path //p' "$OUT/steps/info.log" | head -1)
  TORCH_CMAKE=$v
  record info ok 0 $(( $(date +%s) - t1 )) 60 "gpu: ${ENVINFO[gpu]:--}; nvcc ${ENVINFO[nvcc]:--}; torch ${ENVINFO[torch]:--}; glibc ${ENVINFO[glibc]:-?}; ${ENVINFO[os]:-?}"
}

# ---- b. the carried libraries ----
step_prefix() {
  local t1 msg="" status=ok rc=0 need have f bad
  case "$STEPS" in *",prefix,"*) ;; *) return 0 ;; esac
  t1=$(date +%s)
  {
    echo "### prefix"
    if [ ! -d "$PFX/usr" ] && ls "$DEV"/debs/*.deb >/dev/null 2>&1; then
      echo "unpacking $(ls "$DEV"/debs/*.deb | wc -l) .deb files into $PFX"
      timeout 180 bash "$REPO/scripts/fetch_device_debs.sh" --unpack-only 2>&1 || echo "UNPACK FAILED"
    fi
  } >"$OUT/steps/prefix.log" 2>&1
  if [ ! -d "$PFX/usr" ]; then
    status=failed; rc=1
    msg="no .device/prefix and no .device/debs: carry .device/debs (docs/device.md); the build uses the system's libraries"
  else
    # Runtime: a directory of links to the carried libraries, on LD_LIBRARY_PATH. The common base
    # libraries that other programs here (python, torch) load too stay the system's where it has
    # them (their ABIs are stable); libucm still finds the carried ones through its RUNPATH.
    local rt=$DEV/runtime-lib soname
    rm -rf "$rt"; mkdir -p "$rt"
    for f in "$PFX"/usr/lib/$ARCH_TRIPLET/lib*.so.*; do
      soname=$(basename "$f")
      case "$soname" in
        libz.so.1|libbz2.so.1.0|libcrypto.so.3|libssl.so.3)
          if "$LDCONFIG" -p 2>/dev/null | grep -q "^[[:space:]]*$soname "; then continue; fi ;;
      esac
      ln -sf "$f" "$rt/$soname"
    done
    export LD_LIBRARY_PATH="$rt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PKG_CONFIG_PATH="$PFX/usr/lib/$ARCH_TRIPLET/pkgconfig:$PFX/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    if command -v pkg-config >/dev/null; then PKG_CONFIG_BIN=$(command -v pkg-config); else PKG_CONFIG_BIN=$PFX/usr/bin/pkgconf; fi
    # glibc and libstdc++: what the carried libraries ask for against what is here.
    need=$(grep '^GLIBC_' "$PFX/.ucm-glibc-required" 2>/dev/null | sed 's/GLIBC_//')
    have=${ENVINFO[glibc]:-$(ldd --version 2>&1 | head -1 | grep -oE '[0-9]+\.[0-9]+$')}
    ENVINFO[glibc_required]=$need
    {
      echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
      echo "PKG_CONFIG_PATH=$PKG_CONFIG_PATH"
      echo "pkg-config: $PKG_CONFIG_BIN ($("$PKG_CONFIG_BIN" --version 2>&1))"
      echo "carried libraries need: $(tr '\n' ' ' <"$PFX/.ucm-glibc-required" 2>/dev/null); this machine: glibc $have"
      echo "## ldd of the carried libraries"
      for f in librocksdb.so.7.8 libspdlog.so.1.10 libyaml-cpp.so.0.7 libicuuc.so.72 libtbb.so.12 libcrypto.so.3; do
        ldd "$rt/$f" 2>&1 | sed "s#^#$f: #"
      done
    } >>"$OUT/steps/prefix.log" 2>&1
    if [ -n "$need" ] && [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
      status=warning
      msg="WARNING: this glibc ($have) is older than the carried Debian 12 libraries need ($need): expect link or load failures"
    fi
    local cxx
    cxx=$(grep '^GLIBCXX_' "$PFX/.ucm-glibc-required" 2>/dev/null)
    f=$("$LDCONFIG" -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
    if [ -n "$cxx" ] && [ -n "$f" ] && ! grep -aq "$cxx" "$f"; then
      status=warning; msg="${msg:+$msg; }WARNING: $f lacks $cxx (needs GCC 12's libstdc++ or newer)"
    fi
    bad=$(grep -E "not found|version .* not found" "$OUT/steps/prefix.log" | grep -v '^### ' | head -3 | tr '\n' ' ')
    if [ -n "$bad" ]; then status=warning; msg="${msg:+$msg; }WARNING: $bad"; fi
    [ -n "$msg" ] || msg="$(ls "$rt" | wc -l) libraries; glibc $have >= $need"
  fi
  cat "$OUT/steps/prefix.log" >>"$LOG"
  record prefix "$status" "$rc" $(( $(date +%s) - t1 )) 180 "$msg"
}

# ---- c. configure and build ----
do_configure() {
  local arch=${UCM_CUDA_ARCH:-native} gen=() cm_ver cap attempts=() seen=" " a
  cm_ver=$(cmake --version | head -1 | grep -oE '[0-9]+\.[0-9]+')
  # native needs CMake 3.24 and a visible GPU; the fallbacks: the GPU's compute capability, then 90
  # (the H100's), then without torch (a PyTorch whose CMake config does not load here).
  if [ "$arch" = native ] && [ "$(printf '%s\n3.24\n' "$cm_ver" | sort -V | head -1)" != 3.24 ]; then arch=90; fi
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
  for a in "$arch:ON" "${cap:-90}:ON" "90:ON" "90:OFF"; do
    case "$seen" in *" $a "*) continue ;; esac
    seen="$seen$a "; attempts+=("$a")
  done
  command -v ninja >/dev/null && gen=(-G Ninja)
  for a in "${attempts[@]}"; do
    arch=${a%%:*}
    local torch=${a#*:}
    rm -rf "$BUILD/CMakeCache.txt" "$BUILD/CMakeFiles"
    # PyTorch's CMake config picks its own CUDA architectures: "Auto" compiles and runs a probe
    # with CMAKE_CUDA_STANDARD = the project's C++20, which CMake versions that do not know nvcc's
    # C++20 flags refuse (seen with CMake 3.25 + nvcc 13). TORCH_CUDA_ARCH_LIST skips the probe.
    local tarch=${TORCH_CUDA_ARCH_LIST:-}
    if [ -z "$tarch" ]; then
      if [ -n "$cap" ]; then tarch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ')
      elif [ "$arch" != native ]; then tarch="${arch%?}.${arch: -1}"
      else tarch=9.0
      fi
    fi
    echo "## configure: CUDA architectures $arch, torch $torch (TORCH_CUDA_ARCH_LIST=$tarch)"
    TORCH_CUDA_ARCH_LIST=$tarch cmake -S "$REPO" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DUCM_CUDA=ON -DUCM_WERROR=OFF \
      -DUCM_BUILD_TESTS=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DUCM_WITH_TORCH="$torch" \
      "-DCMAKE_PREFIX_PATH=${TORCH_CMAKE:+$TORCH_CMAKE;}$PFX/usr;$PFX/usr/lib/$ARCH_TRIPLET/cmake" \
      -DCMAKE_LIBRARY_PATH="$PFX/usr/lib/$ARCH_TRIPLET" -DCMAKE_INCLUDE_PATH="$PFX/usr/include" \
      ${PKG_CONFIG_BIN:+-DPKG_CONFIG_EXECUTABLE="$PKG_CONFIG_BIN"} -DUCM_PYTHON="$PY" 2>&1 | tee "$BUILD/configure.log"
    if [ "${PIPESTATUS[0]}" = 0 ]; then
      local found flags
      found=$(grep -o 'ucm: torch=[A-Z]* cuda=[A-Z]*' "$BUILD/configure.log" | tail -1)
      flags=$(cmake -N -LA "$BUILD" 2>/dev/null | grep -E '^(RocksDB_DIR|TBB_DIR|spdlog_DIR|fmt_DIR|CLI11_DIR|nlohmann_json_DIR|yaml-cpp_DIR|GTest_DIR|OPENSSL_CRYPTO_LIBRARY|ICU_UC_LIBRARY_RELEASE|pkgcfg_lib_XXHASH_xxhash|Torch_DIR|CMAKE_CUDA_ARCHITECTURES|CMAKE_CUDA_COMPILER):')
      echo "## resolved"; echo "$flags"
      note "${found#ucm: }, arch $arch; $(echo "$flags" | grep -c "$PFX") of $(echo "$flags" | grep -vc 'Torch_DIR\|CMAKE_CUDA') Debian packages resolved in .device/prefix"
      # Configured, but without torch or CUDA: a warning (the precompute or GPU steps will fail).
      case "$found" in *"torch=ON cuda=ON"*) return 0 ;; *) return 5 ;; esac
    fi
  done
  return 1
}
do_build() {
  local have=() t
  local list
  list=$(cmake --build "$BUILD" --target help 2>/dev/null | sed -E 's/^\.\.\. //; s/:.*//; s/ .*//')
  for t in $TARGETS; do
    if grep -qx "$t" <<<"$list"; then have+=("$t"); else echo "no target $t in this build (skipped)"; fi
  done
  [ ${#have[@]} -gt 0 ] || { note "none of the targets exist: $TARGETS"; return 1; }
  note "targets: ${have[*]}"
  cmake --build "$BUILD" -j"$(nproc)" --target "${have[@]}"
}

# ---- d. tests ----
do_ctest() {  # label
  local junit=() rc
  ctest --help 2>/dev/null | grep -q -- --output-junit && junit=(--output-junit "$OUT/ctest_$1.xml")
  ctest --test-dir "$BUILD" -L "$1" --output-on-failure --timeout 240 "${junit[@]}" 2>&1 | tee "$OUT/ctest_$1.log"
  rc=${PIPESTATUS[0]}
  if grep -q "No tests were found" "$OUT/ctest_$1.log"; then note "no tests labelled $1 in this build"; return 4; fi
  note "$(grep -E 'tests passed|tests failed' "$OUT/ctest_$1.log" | tail -1)"
  return "$rc"
}

# The connector's GPU path (no vLLM on the machine): gpu_layout.load / read on CUDA tensors laid
# out as vLLM 0.32 lays them out, every byte against a host reference; one line per case.
do_vllm_layouts() {
  [ -f "$BUILD/lib/libucm.so" ] || { note "no $BUILD/lib/libucm.so (build failed)"; exit 3; }
  PYTHONPATH="$REPO/lib/python" UCM_LIB=$BUILD/lib/libucm.so "$PY" "$REPO/scripts/device_vllm_layouts.py" \
    --device "${UCM_VLLM_LAYOUTS_DEVICE:-cuda}" --json "$OUT/vllm_layouts.json" | tee "$BUILD/vllm_layouts.txt"
  local rc=${PIPESTATUS[0]}
  note "$(grep '^device_vllm_layouts:' "$BUILD/vllm_layouts.txt" | tail -1 | cut -c22-)"
  return "$rc"
}

# ---- e. benchmarks ----
UCM_BIN=$BUILD/bin/ucm
export UCM_BIN
need_ucm() { [ -x "$UCM_BIN" ] || { note "no $UCM_BIN (build failed)"; exit 3; }; }
export -f need_ucm
do_bench_kernels() {
  need_ucm
  "$UCM_BIN" bench kernels --json >"$OUT/bench_kernels.json" || return $?
  # Every case's ratio (and, for scatter by measurement, what it measured) in the step's line.
  note "$("$PY" - "$OUT/bench_kernels.json" <<'PYEOF' 2>/dev/null
import json, sys
d = json.load(open(sys.argv[1]))
out = []
for c in d["cases"]:
    s = "%s %.2fx (%s)" % (c["name"].replace("scatter ", "").replace(" + top-k", ""), c["ratio"], c["path"])
    m = c.get("calibration_ms_per_layer")
    if m:
        s += " [copies %.3f / kernel %.3f ms]" % (m["copies"], m["kernel"])
    out.append(s)
print("; ".join(out))
PYEOF
)"
}
do_bench_store() {
  need_ucm
  local scratch=$BUILD/bench-scratch
  mkdir -p "$scratch"
  # shellcheck disable=SC2086
  "$UCM_BIN" bench store --device 0 --store "$scratch" ${UCM_BENCH_STORE_ARGS:---blocks 4096 --lookup-blocks 0} --json \
    >"$OUT/bench_store.json"
}
MODEL=$BUILD/device-model
CORPUS=$DEV/data/corpus5.jsonl
TEMPLATE=$REPO/configs/template_chat.txt
GPU_ARGS=${UCM_PRECOMPUTE_GPU_ARGS---device cuda}
export MODEL CORPUS TEMPLATE GPU_ARGS
do_model() {
  [ -f "$DEV/data/tokenizer/config.json" ] || { note "no .device/data/tokenizer: carry .device/data (docs/device.md)"; exit 3; }
  "$PY" "$REPO/scripts/make_device_model.py" --tokenizer-dir "$DEV/data/tokenizer" --out "$MODEL" \
    --layers "${UCM_DEVICE_MODEL_LAYERS:-4}"
}
do_bench_precompute() {
  need_ucm
  [ -f "$MODEL/model.safetensors" ] || { note "no model (step model)"; exit 3; }
  local dev=()
  if [ -n "$GPU_ARGS" ] && "$UCM_BIN" bench precompute --help 2>&1 | grep -q -- '--device'; then
    read -r -a dev <<<"$GPU_ARGS"
  else
    note "ucm bench precompute has no --device option: ran on the CPU"
  fi
  local args=(bench precompute --model "$MODEL" --corpus "$CORPUS" --docs 5 --template "$TEMPLATE" "${dev[@]}" --json)
  SPDLOG_LEVEL=${SPDLOG_LEVEL:-debug} stdbuf -oL "$UCM_BIN" "${args[@]}" >"$OUT/bench_precompute.json"
  local rc=$?
  if [ "$rc" -ge 128 ]; then
    # A crash: where (gdb, when the machine has it), and whether the CPU path crashes too.
    echo "## crashed with rc=$rc; stdout had $(wc -c <"$OUT/bench_precompute.json") bytes"
    if command -v gdb >/dev/null; then
      timeout 120 gdb -q -batch -ex run -ex bt -ex 'info threads' --args "$BUILD/libexec/ucm/ucm-torch" "${args[@]}" 2>&1 | tail -80
    elif gcc -shared -fPIC -O1 -o "$BUILD/segv_trace.so" "$REPO/scripts/segv_trace.c" -ldl; then
      echo "## no gdb: scripts/segv_trace.c preloaded"
      LD_PRELOAD=$BUILD/segv_trace.so timeout 120 "$BUILD/libexec/ucm/ucm-torch" "${args[@]}" 2>&1 >/dev/null |
        grep SEGV_TRACE | head -40 | while read -r _ obj off rest; do
          if [ -f "$obj" ] && [ "${off#0x}" != "$off" ]; then
            echo "$(basename "$obj") $off $rest :: $(addr2line -f -C -i -e "$obj" "$off" 2>/dev/null | tr '\n' ' ' | cut -c1-400)"
          else
            echo "$obj $off $rest"
          fi
        done
    else
      echo "## no gdb and no gcc on this machine"
    fi
    echo "## the same on the CPU"
    "$UCM_BIN" bench precompute --model "$MODEL" --corpus "$CORPUS" --docs 5 --template "$TEMPLATE" --json \
      >"$OUT/bench_precompute_cpu.json"
    note "crashed (rc=$rc) with ${dev[*]}; on the CPU: rc=$?"
  fi
  return "$rc"
}

# ---- f. GPU precompute against CPU precompute ----
do_precompute() {  # cpu|gpu
  need_ucm
  [ -f "$MODEL/model.safetensors" ] || { note "no model (step model)"; exit 3; }
  [ -f "$CORPUS" ] || { note "no $CORPUS: carry .device/data"; exit 3; }
  local dev=() store=$BUILD/store-$1
  if [ "$1" = gpu ]; then
    if [ -z "$GPU_ARGS" ]; then note "UCM_PRECOMPUTE_GPU_ARGS is empty: a second CPU run"
    elif "$UCM_BIN" precompute --help 2>&1 | grep -q -- '--device'; then read -r -a dev <<<"$GPU_ARGS"
    else note "ucm precompute has no --device option (yet)"; exit 3
    fi
  fi
  rm -rf "$store"
  "$UCM_BIN" precompute --model "$MODEL" --corpus "$CORPUS" --template "$TEMPLATE" --store "$store" "${dev[@]}" --json \
    >"$OUT/precompute_$1.json"
}
do_compare() {
  local a=$BUILD/store-cpu b=$BUILD/store-gpu
  [ -d "$a" ] && [ -d "$b" ] || { note "needs both stores (precompute_cpu, precompute_gpu)"; exit 3; }
  "$UCM_BIN" tokenize --model "$MODEL" --corpus "$CORPUS" --template "$TEMPLATE" >"$BUILD/corpus5.ids.jsonl" || return 1
  UCM_LIB=$BUILD/lib/libucm.so "$PY" "$REPO/scripts/compare_stores.py" --a "$a" --b "$b" \
    --ids "$BUILD/corpus5.ids.jsonl" --json "$OUT/compare.json" | tee "$BUILD/compare.txt"
  local rc=${PIPESTATUS[0]}
  note "$(grep '^compare_stores: [0-9]' "$BUILD/compare.txt" | head -1 | cut -c17-)"
  return "$rc"
}
export -f do_configure do_build do_ctest do_vllm_layouts do_bench_kernels do_bench_store do_model do_bench_precompute do_precompute do_compare
export TARGETS ARCH_TRIPLET

# ---- the run ----
say "repo $REPO, out $OUT, build $BUILD, budget ${BUDGET}s$([ "$DRY" = 1 ] && echo ', DRY: info, prefix and configure only')"
TORCH_CMAKE=""
PKG_CONFIG_BIN=$(command -v pkg-config || true)
step_info
# PyTorch's CMake prefix also where the info step was not picked (UCM_DEVICE_STEPS): without it,
# configure would find another libtorch (a system one) first.
[ -n "$TORCH_CMAKE" ] || TORCH_CMAKE=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
step_prefix
export TORCH_CMAKE PKG_CONFIG_BIN LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" PKG_CONFIG_PATH="${PKG_CONFIG_PATH:-}"
mkdir -p "$BUILD"
STEP_NAME=configure run_step configure 150 do_configure
if [ "$(status_of configure)" != failed ] && [ "$(status_of configure)" != timeout ]; then
  STEP_NAME=build run_step build 300 do_build
else
  case "$STEPS" in *",build,"*) record build skipped 0 0 0 "configure failed" ;; esac
fi
export STEP_NAME
for s in test_gpu:90:"do_ctest gpu" vllm_layouts:60:do_vllm_layouts bench_kernels:60:do_bench_kernels model:60:do_model \
         precompute_gpu:90:"do_precompute gpu" precompute_cpu:90:"do_precompute cpu" compare:60:do_compare \
         bench_store:90:do_bench_store bench_precompute:90:do_bench_precompute test_kernels:90:"do_ctest kernels"; do
  name=${s%%:*}; rest=${s#*:}; def=${rest%%:*}; fn=${rest#*:}
  STEP_NAME=$name run_step "$name" "$def" "$fn"
done
