#!/bin/sh
# tests/isa/check_isa_confinement.sh ELF...
#
# Every function of ucm's binaries that holds an instruction beyond x86-64's baseline (VEX:
# AVX/AVX2/FMA; EVEX: AVX-512; AVX512-BF16; AMX) must belong to a unit compiled for that ISA
# and chosen at run time (docs/model.md, "Kernels chosen at run time"):
#
#   ucm::kernels::cpu::f32::avx2::...   VEX                  (kernels/cpu/fp32_avx2.cc)
#   ucm::kernels::cpu::f32::avx512::... VEX, EVEX            (kernels/cpu/fp32_avx512.cc)
#   ucm::kernels::cpu::hw::...          VEX, EVEX, BF16      (kernels/cpu/bf16.cc)
#   <fn> [clone .arch_x86_64_v3]      VEX                  (GCC target_clones: lib/src/retrieval, repr)
#   <fn> [clone .arch_x86_64_v4]      VEX, EVEX
#
# Anything else (a library template, an inline function of a header, a lambda) compiled inside
# such a unit and picked by the linker for every caller would execute those instructions on CPUs
# without them: SIGILL on a Skylake-SP Xeon (no AVX512-BF16) or an AVX2-only machine, which no
# test on a CPU that has them notices. The check reads the linked binaries (objdump -d), so it
# sees the copy the linker kept. ucm has no AMX code of its own (oneDNN's is in libtorch).
#
# Prints each function out of place with the first such instruction; exit 0 when none, 1 when
# some, 2 on a usage or tool error.
set -u
if [ $# -eq 0 ]; then
  echo "usage: $0 ELF..." >&2
  exit 2
fi
command -v objdump >/dev/null 2>&1 || { echo "$0: objdump not found (Debian: binutils)" >&2; exit 2; }
bad=0
for elf in "$@"; do
  if [ ! -f "$elf" ]; then
    echo "$0: $elf: no such file" >&2
    exit 2
  fi
  if ! objdump -t "$elf" 2>/dev/null | grep -q ' F \.text'; then
    echo "$0: $elf has no function symbols (stripped?): check the build tree's binaries" >&2
    exit 2
  fi
  out=$(objdump -d --insn-width=15 "$elf" | awk -F'\t' '
    # Function labels: "0000000000123abc <_ZN3ucm...>:" (mangled names: the namespace is the prefix).
    /^[0-9a-f]+ <.*>:$/ { fn = substr($0, index($0, "<") + 1); sub(/>:$/, "", fn); next }
    /^ *[0-9a-f]+:\t/ {
      if (NF < 3) next
      nb = split($2, b, " "); i = 1
      while (i <= nb && b[i] ~ /^(26|2e|36|3e|64|65|66|67|f0|f2|f3)$/) i++   # legacy prefixes
      mn = $3; sub(/ .*/, "", mn)
      cls = ""
      if (mn ~ /^(tdp|tile|ldtilecfg|sttilecfg)/) cls = "AMX"
      else if (mn ~ /^(vdpbf16ps|vcvtne2ps2bf16|vcvtneps2bf16)$/) cls = "BF16"
      else if (b[i] == "62") cls = "EVEX"          # 0x62 in 64-bit mode: always EVEX (AVX-512)
      else if (b[i] == "c4" || b[i] == "c5") cls = "VEX"
      if (cls == "") next
      base = fn; sub(/\.(arch_x86_64_v[234]|cold|part\.[0-9]+|constprop\.[0-9]+|isra\.[0-9]+)+$/, "", base)
      ok = 0
      if (fn ~ /\.arch_x86_64_v4/) ok = cls == "VEX" || cls == "EVEX"
      else if (fn ~ /\.arch_x86_64_v3/) ok = cls == "VEX"
      else if (base ~ /^_ZZ?N?K?3ucm7kernels3cpu2hw/) ok = cls != "AMX"
      else if (base ~ /^_ZZ?N?K?3ucm7kernels3cpu3f326avx512/) ok = cls == "VEX" || cls == "EVEX"
      else if (base ~ /^_ZZ?N?K?3ucm7kernels3cpu3f324avx2/) ok = cls == "VEX"
      if (ok) { used[fn] = 1; next }
      key = fn SUBSEP cls
      if (!(key in seen)) { seen[key] = 1; sub(/^ +/, "", $1); print cls "\t" fn "\t" $1 " " $3 }
    }
    END { n = 0; for (f in used) n++; print "ok\t" n }')
  nok=$(printf '%s\n' "$out" | awk -F'\t' '$1 == "ok" { print $2 }')
  printf '%s\n' "$out" | awk -F'\t' '$1 != "ok"' | while IFS="$(printf '\t')" read -r cls fn insn; do
    echo "$elf: $(echo "$fn" | c++filt | cut -c1-200): $cls instruction outside its ISA unit, first at $insn"
  done
  if printf '%s\n' "$out" | grep -qv '^ok'; then
    bad=1
  else
    echo "$elf: $nok functions with VEX/EVEX/BF16 code, every one in its ISA unit"
  fi
done
exit $bad
