#!/usr/bin/env bash
# Prepares .device/ (git-ignored) for the one-shot GPU check (scripts/device_check.sh, docs/device.md):
#
#   .device/debs/     Debian 12 .deb files of every library the build needs that PyTorch does not
#                     provide (RocksDB and its compression libraries, TBB, spdlog, fmt, CLI11,
#                     nlohmann-json, OpenSSL, xxhash, yaml-cpp, liburing, PCRE2, ICU, GoogleTest,
#                     pkgconf), -dev packages and their runtime libraries; MANIFEST.tsv lists them.
#   .device/prefix/   the same, unpacked (dpkg-deb -x), pruned (docs, man pages, unused static
#                     libraries) and made relocatable (.pc files use ${pcfiledir}), usable from
#                     any path: CMAKE_PREFIX_PATH=$PWD/.device/prefix/usr.
#   .device/data/     the 5 documents of the device's precompute check (the first 5 of the default
#                     corpus, python3.11-doc's .rst.txt pages, as JSONL) and the default model's
#                     tokenizer and config (models/SmolLM2-135M-Instruct, without its weights).
#
# A device machine gets `.device/debs` and `.device/data` (the smaller form; the table says why),
# and device_check.sh unpacks the debs there with `fetch_device_debs.sh --unpack-only`.
#
# Usage: scripts/fetch_device_debs.sh [--unpack-only] [--no-data]
#   --unpack-only  no apt: (re)build .device/prefix from the .deb files already in .device/debs
#                  (what device_check.sh runs on the device; needs dpkg-deb, or ar + tar)
#   --no-data      skip .device/data
# Environment: UCM_DEVICE_DIR (default .device), UCM_DEVICE_MAX_MIB (default 60: exit 1 above it),
#   UCM_CORPUS_DIR (default /usr/share/doc/python3.11/html/_sources), UCM_MODEL_DIR (default
#   models/SmolLM2-135M-Instruct).
# Idempotent: downloads only what is missing, re-unpacks only when the set of .deb files changed.
# Needs no root: apt-get download and dpkg-deb -x write where they are told (apt's package lists
# must be there: `apt-get update` once, as root, if apt-cache finds nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
DEV=${UCM_DEVICE_DIR:-.device}
case "$DEV" in /*) ;; *) DEV=$REPO/$DEV ;; esac
DEBS=$DEV/debs
PREFIX=$DEV/prefix
DATA=$DEV/data
MAX_MIB=${UCM_DEVICE_MAX_MIB:-60}
ARCH=x86_64-linux-gnu

UNPACK_ONLY=0
WITH_DATA=1
for a in "$@"; do
  case "$a" in
    --unpack-only) UNPACK_ONLY=1 ;;
    --no-data) WITH_DATA=0 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "fetch_device_debs: unknown argument $a" >&2; exit 2 ;;
  esac
done

log() { echo "fetch_device_debs: $*" >&2; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

# -dev packages the build's find_package / pkg_check_modules calls need (CMakeLists.txt,
# lib/, pipelines/, tests/). Their runtime libraries come in through the dependency closure below.
SEEDS=(
  librocksdb-dev            # RocksDB CONFIG; its config needs gflags, Snappy, ZLIB, BZip2, lz4, zstd:
  libgflags-dev libsnappy-dev zlib1g-dev libbz2-dev liblz4-dev libzstd-dev
  libtbb-dev                # TBB CONFIG (its targets name libtbbbind and libtbbmalloc too)
  libspdlog-dev libfmt-dev  # spdlog CONFIG (finds fmt)
  libcli11-dev nlohmann-json3-dev
  libssl-dev                # OpenSSL::Crypto
  libxxhash-dev             # pkg-config libxxhash
  libyaml-cpp-dev           # yaml-cpp CONFIG
  liburing-dev              # pkg-config liburing (optional in lib/bench; used when found)
  libpcre2-dev libicu-dev   # pipelines/tokenizer: pkg-config libpcre2-8, FindICU uc
  libgtest-dev libgmock-dev # GTest CONFIG (GTestTargets.cmake names libgmock.a: it must exist)
  pkgconf-bin               # pkg-config itself, for a machine without one
)
# Dependencies left out: the toolchain and C library (the device has its own; a glibc older than the
# one these packages were built against is reported by device_check.sh), sources and tools nothing
# here uses, and libraries only loaded on demand.
declare -A SKIP_WHY=(
  [libc6]="C library: the device's own" [libc6-dev]="C library headers: the device's own"
  [libc-dev]="C library headers: the device's own" [libgcc-s1]="toolchain runtime: the device's own"
  [libstdc++6]="toolchain runtime: the device's own (needs GLIBCXX_3.4.30, GCC 12, or newer)"
  [linux-libc-dev]="kernel headers: the device's own (liburing ships its own io_uring.h)"
  [catch2]="spdlog's test framework: unused" [googletest]="GoogleTest sources: libgtest-dev has the built libraries"
  [icu-devtools]="ICU tools (genrb...): unused" [libhwloc15]="loaded only with libtbbbind, which ucm never loads"
  [libpcre2-16-0]="UTF-16 PCRE2: unused" [libpcre2-32-0]="UTF-32 PCRE2: unused"
  [libpcre2-posix3]="POSIX PCRE2 wrapper: unused" [debconf]="packaging tool" [perl]="packaging tool"
)

# ---- resolve: the dependency closure of SEEDS (Depends and Pre-Depends, first alternative) ----
# One apt-cache call per level of the closure (each call loads apt's cache: about a second).
resolve() {
  local -A seen=()
  local level=("${SEEDS[@]}") next p d
  PKGS=()
  while [ ${#level[@]} -gt 0 ]; do
    next=()
    local ask=()
    for p in "${level[@]}"; do
      [ -n "${seen[$p]:-}" ] && continue
      seen[$p]=1
      if [ -n "${SKIP_WHY[$p]:-}" ]; then NOTES+=("skipped $p: ${SKIP_WHY[$p]}"); continue; fi
      PKGS+=("$p"); ask+=("$p")
    done
    [ ${#ask[@]} -gt 0 ] || break
    # "pkg" at column 0, then "  Depends: x", "  PreDepends: y", "  |Depends: alt" (an
    # alternative: only the first is followed), "  Depends: <virtual>" (only libc-dev here: skipped).
    while read -r d; do
      d=${d#<}; d=${d%>}
      [ -n "${seen[$d]:-}" ] || next+=("$d")
    done < <(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
                 --no-enhances "${ask[@]}" 2>/dev/null | awk '/^  (Pre)?Depends:/ {print $2}')
    level=("${next[@]}")
  done
}

download() {
  mkdir -p "$DEBS"
  NOTES=()
  resolve
  # Candidates (what apt-get download fetches), in one call.
  local -A ver=()
  local p v f
  while read -r p v; do ver[$p]=$v; done < <(apt-cache policy "${PKGS[@]}" 2>/dev/null |
    awk '/^[^ ].*:$/ { p = substr($0, 1, length($0) - 1) } /^  Candidate:/ { print p, $2 }')
  local missing=() want=()
  for p in "${PKGS[@]}"; do
    v=${ver[$p]:-}
    if [ -z "$v" ] || [ "$v" = "(none)" ]; then
      log "no candidate for $p (run 'apt-get update' as root once)"; exit 1
    fi
    # apt-get download writes pkg_version_arch.deb, an epoch's ':' as %3a.
    f=$(cd "$DEBS" && ls -1 "${p}_${v//:/%3a}_"*.deb 2>/dev/null | head -1 || true)
    [ -n "$f" ] && [ -s "$DEBS/$f" ] || missing+=("$p=$v")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "apt-get download ${#missing[@]} packages"
    (cd "$DEBS" && apt-get download -q "${missing[@]}" >/dev/null)
  fi
  # MANIFEST.tsv: package, version, file, bytes. Stale .deb files (another version, a package no
  # longer wanted) go.
  : >"$DEBS/MANIFEST.tsv"
  for p in "${PKGS[@]}"; do
    v=${ver[$p]}
    f=$(cd "$DEBS" && ls -1 "${p}_${v//:/%3a}_"*.deb 2>/dev/null | head -1 || true)
    [ -n "$f" ] || { log "missing ${p}_${v} after download"; exit 1; }
    want+=("$f")
    printf '%s\t%s\t%s\t%s\n' "$p" "$v" "$f" "$(stat -c %s "$DEBS/$f")" >>"$DEBS/MANIFEST.tsv"
  done
  local keep w
  for f in "$DEBS"/*.deb; do
    keep=0
    for w in "${want[@]}"; do [ "$(basename "$f")" = "$w" ] && keep=1 && break; done
    [ $keep = 1 ] || { log "removing stale $(basename "$f")"; rm -f "$f"; }
  done
}

# ---- unpack: .device/debs -> .device/prefix (pruned, relocatable) ----
extract_deb() {  # deb dest: dpkg-deb where there is one, else ar + tar (data.tar.{xz,zst,gz})
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$2"
  else
    local member
    member=$(ar t "$1" | grep '^data\.tar' | head -1)
    case "$member" in
      *.xz) ar p "$1" "$member" | tar -xJ -C "$2" ;;
      *.zst) ar p "$1" "$member" | zstd -dc | tar -x -C "$2" ;;
      *.gz) ar p "$1" "$member" | tar -xz -C "$2" ;;
      *) ar p "$1" "$member" | tar -x -C "$2" ;;
    esac
  fi
}

unpack() {
  local stamp cur
  ls "$DEBS"/*.deb >/dev/null 2>&1 || { log "no .deb files in $DEBS"; exit 1; }
  stamp=$( (cd "$DEBS" && ls -1 ./*.deb | sort; echo "prune-relocate v3") | sha256sum | cut -c1-16)
  cur=$(cat "$PREFIX/.ucm-prefix-stamp" 2>/dev/null || true)
  if [ "$cur" = "$stamp" ] && [ -d "$PREFIX/usr" ]; then
    log "$PREFIX is up to date ($stamp)"
    return
  fi
  local tmp=$PREFIX.tmp.$$ f
  rm -rf "$tmp"; mkdir -p "$tmp"
  for f in "$DEBS"/*.deb; do extract_deb "$f" "$tmp"; done
  prune "$tmp"
  relocate "$tmp"
  glibc_needs "$tmp" >"$tmp/.ucm-glibc-required"
  echo "$stamp" >"$tmp/.ucm-prefix-stamp"
  rm -rf "$PREFIX"; mv "$tmp" "$PREFIX"
  log "unpacked $(ls "$DEBS"/*.deb | wc -l) packages into $PREFIX"
}

prune() {  # what no build or run here reads
  local root=$1 a base
  rm -rf "$root"/usr/share/{doc,man,info,lintian,bug,doc-base} "$root"/etc
  # ICU: ucm links libicuuc only (which loads libicudata); the other ICU libraries go.
  rm -f "$root"/usr/lib/$ARCH/libicu{i18n,io,test,tu}.so*
  # Static libraries: GoogleTest's are the only ones linked (Debian ships no shared gtest). Any other
  # that a CMake target file names (RocksDB::rocksdb, the static flavours of zstd, gflags...) must
  # exist for the config to load: it becomes an empty archive; the rest go.
  local cmake_text
  cmake_text=$(find "$root/usr" -name '*.cmake' -type f -exec cat {} + 2>/dev/null)
  while IFS= read -r a; do
    base=$(basename "$a")
    case "$base" in libgtest*.a|libgmock*.a) continue ;; esac
    if grep -qF "$base" <<<"$cmake_text"; then
      printf '!<arch>\n' >"$a"
    else
      rm -f "$a"
    fi
  done < <(find "$root" -name '*.a' -type f)
  # pkg-config: Debian's `pkgconf` package only adds this link.
  [ -e "$root/usr/bin/pkgconf" ] && ln -sf pkgconf "$root/usr/bin/pkg-config"
  return 0
}

relocate() {  # absolute /usr paths -> paths relative to the file
  local root=$1 pc dir rel
  # .pc files: prefix=/usr and friends become ${pcfiledir}/<up to usr>; pkg-config and pkgconf
  # both define pcfiledir as the directory of the .pc file.
  while IFS= read -r pc; do
    dir=$(dirname "${pc#"$root"/usr/}")           # e.g. lib/x86_64-linux-gnu/pkgconfig
    rel=$(echo "$dir" | awk -F/ '{ s = ".."; for (i = 2; i <= NF; i++) s = s "/.."; print s }')
    sed -i -E "s#(^|[=\"[:space:]]|-I|-L)/usr(/|\$|[\"[:space:]])#\1\${pcfiledir}/$rel\2#g" "$pc"
  done < <(find "$root/usr" -name '*.pc' -type f)
  # CMake files: Debian's configs mostly compute their prefix from their own location
  # (PACKAGE_PREFIX_DIR, _IMPORT_PREFIX); the "/usr move" check names /usr but applies only where
  # the file really is under /usr (the REALPATH line and the line after
  # `if(_realCurr STREQUAL _realOrig)`). Any other /usr path (Snappy's `set(_IMPORT_PREFIX "/usr")`
  # and IMPORTED_LOCATIONs, the libbz2.so in RocksDB::rocksdb-shared's INTERFACE_LINK_LIBRARIES)
  # becomes ${CMAKE_CURRENT_LIST_DIR}/<up to usr>. Plain POSIX awk (the device may have mawk).
  local f
  while IFS= read -r f; do
    grep -q '/usr' "$f" || continue
    dir=$(dirname "${f#"$root"/usr/}")
    rel=$(echo "$dir" | awk -F/ '{ s = ".."; for (i = 2; i <= NF; i++) s = s "/.."; print s }')
    awk -v rel="$rel" '
      function reloc(s,   out, i, pre, post) {
        out = ""
        while ((i = index(s, "/usr")) > 0) {
          pre = (i > 1) ? substr(s, i - 1, 1) : ""
          post = substr(s, i + 4, 1)
          if (index("\"; (", pre) > 0 && index("/\";)", post) > 0 || pre == "" && post == "/") {
            out = out substr(s, 1, i - 1) "${CMAKE_CURRENT_LIST_DIR}/" rel
            changed++
          } else {
            out = out substr(s, 1, i + 3)
          }
          s = substr(s, i + 4)
        }
        return out s
      }
      {
        line = $0
        if (!after_check && line !~ /REALPATH/ && line !~ /^[ \t]*#/) line = reloc(line)
        print line
        if ($0 ~ /[^ \t]/) after_check = ($0 ~ /if\(_realCurr STREQUAL _realOrig\)/)
      }
      END { if (changed) printf "%d\n", changed > "/dev/stderr" }' "$f" >"$f.new" 2>"$f.count"
    [ -s "$f.count" ] && log "relocated $(cat "$f.count") /usr paths in ${f#"$root"/}"
    mv "$f.new" "$f"; rm -f "$f.count"
  done < <(find "$root/usr" -name '*.cmake' -type f)
}

glibc_needs() {  # the newest GLIBC_ and GLIBCXX_ symbol versions the prefix's binaries need
  local root=$1
  local files
  files=$(find "$root/usr/lib" "$root/usr/bin" -type f \( -name '*.so*' -o -perm -u+x \) 2>/dev/null)
  # shellcheck disable=SC2086
  { objdump -T $files 2>/dev/null || true; } | grep -oE '\((GLIBC|GLIBCXX|CXXABI)_[0-9.]+\)' | tr -d '()' | sort -u | sort -V |
    awk -F_ '{ last[$1] = $0 } END { for (k in last) print last[k] }' | sort
}

# ---- data: 5 real documents and the tokenizer of the default model ----
make_data() {
  local corpus=${UCM_CORPUS_DIR:-/usr/share/doc/python3.11/html/_sources}
  local model=${UCM_MODEL_DIR:-$REPO/models/SmolLM2-135M-Instruct}
  mkdir -p "$DATA/tokenizer"
  if [ -d "$corpus" ]; then
    # The first 5 documents of the default corpus in its own order (bytewise order of the
    # relative paths, docs/corpus.md), as JSONL {id, text, source}: ids equal precompute's.
    python3 - "$corpus" "$DATA/corpus5.jsonl" <<'EOF'
import json, os, sys
root, out = sys.argv[1], sys.argv[2]
ids = []
for d, _, files in os.walk(root):
    for f in files:
        if f.endswith(".rst.txt"):
            ids.append(os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/"))
ids.sort(key=lambda s: s.encode())
with open(out + ".tmp", "w", encoding="utf-8") as o:
    for i in ids[:5]:
        p = os.path.join(root, i)
        text = open(p, "rb").read().decode("utf-8")
        o.write(json.dumps({"id": i, "text": text, "source": p}, ensure_ascii=False) + "\n")
os.replace(out + ".tmp", out)
EOF
  else
    log "no corpus at $corpus (apt-get install python3.11-doc): .device/data/corpus5.jsonl not written"
  fi
  local f n=0
  for f in tokenizer.json tokenizer_config.json config.json generation_config.json; do
    if [ -f "$model/$f" ]; then cp -p "$model/$f" "$DATA/tokenizer/$f"; n=$((n + 1)); fi
  done
  [ -f "$DATA/tokenizer/tokenizer.json" ] && [ -f "$DATA/tokenizer/config.json" ] ||
    log "no tokenizer.json/config.json in $model (scripts/fetch_model.py): the device's precompute check will be skipped"
}

# ---- report ----
report() {
  local total=0 p v f b
  printf '%-22s %-26s %10s\n' package version "deb KiB"
  while IFS=$'\t' read -r p v f b; do
    printf '%-22s %-26s %10d\n' "$p" "$v" $((b / 1024))
    total=$((total + b))
  done <"$DEBS/MANIFEST.tsv"
  local n prefix_b debs_b data_b=0
  n=$(wc -l <"$DEBS/MANIFEST.tsv")
  debs_b=$(du -sb "$DEBS" | cut -f1)
  prefix_b=$(du -sb "$PREFIX" | cut -f1)
  [ -d "$DATA" ] && data_b=$(du -sb "$DATA" | cut -f1)
  printf '%-22s %-26s %10d\n' "TOTAL ($n packages)" "" $((total / 1024))
  echo
  echo "debs:   $(mib "$debs_b") MiB ($DEBS)"
  echo "prefix: $(mib "$prefix_b") MiB unpacked and pruned ($PREFIX)"
  echo "data:   $(mib "$data_b") MiB ($DATA)"
  echo "needs:  $(tr '\n' ' ' <"$PREFIX/.ucm-glibc-required")(newest symbol versions the libraries ask for)"
  local rel_debs=${DEBS#"$REPO"/} rel_prefix=${PREFIX#"$REPO"/} rel_data=${DATA#"$REPO"/}
  if [ "$debs_b" -le "$prefix_b" ]; then
    CARRY="[\"$rel_debs\", \"$rel_data\"]"; carry_b=$((debs_b + data_b))
  else
    CARRY="[\"$rel_prefix\", \"$rel_data\"]"; carry_b=$((prefix_b + data_b))
  fi
  echo "carry:  $CARRY ($(mib "$carry_b") MiB; the smaller of debs and prefix, plus data)"
  for n in "${NOTES[@]}"; do echo "note:   $n"; done
  if [ "$total" -gt $((MAX_MIB * 1048576)) ]; then
    log "FAIL: the packages total $(mib "$total") MiB, over ${MAX_MIB} MiB"; exit 1
  fi
  if [ "$carry_b" -gt $((MAX_MIB * 1048576)) ]; then
    log "FAIL: the carried paths total $(mib "$carry_b") MiB, over ${MAX_MIB} MiB"; exit 1
  fi
}

NOTES=()
if [ "$UNPACK_ONLY" = 1 ]; then
  unpack
  exit 0
fi
command -v apt-get >/dev/null || { log "apt-get is needed (a Debian 12 machine)"; exit 1; }
download
unpack
[ "$WITH_DATA" = 1 ] && make_data
report
