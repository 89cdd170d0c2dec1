#!/usr/bin/env bash
# Installs the build tree BUILD into a scratch prefix and builds a tiny C consumer against it
# twice: with CMake (find_package(ucm), ucm::ucm) and with pkg-config (ucm.pc). Runs both, then
# the installed `ucm` and, through it, the installed `ucm-torch`.
# Usage: check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log"
# Exactly the C ABI headers (docs/library.md, "Installed headers"); no C++ header.
headers=$(cd "$tmp/prefix/include/ucm" && ls | tr '\n' ' ')
test "$headers" = "blend.h corpus.h retrieval.h ucm.h version.h " || { echo "installed headers: $headers" >&2; exit 1; }
ls -l "$tmp/prefix/lib/" | grep -q 'libucm.so ->' || { echo "libucm.so symlink missing" >&2; exit 1; }
soname=$(objdump -p "$tmp/prefix/lib/libucm.so" | awk '/SONAME/ {print $2}')
echo "installed $(basename "$(readlink -f "$tmp/prefix/lib/libucm.so")"), SONAME $soname"
# 1. CMake
cmake -S "$src/tests/install/consumer" -B "$tmp/c1" -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/c1.log" \
  || { cat "$tmp/c1.log"; exit 1; }
cmake --build "$tmp/c1" >"$tmp/c1b.log" || { cat "$tmp/c1b.log"; exit 1; }
LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/c1/consumer" "$tmp/store1"
# 2. pkg-config
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
test "$(pkg-config --modversion ucm)" = "$(sed -n 's/#define UCM_VERSION_STRING "\(.*\)"/\1/p' "$tmp/prefix/include/ucm/version.h")"
cc -std=c11 -Wall -Werror "$src/tests/install/consumer/consumer.c" $(pkg-config --cflags --libs ucm) -o "$tmp/c2"
LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/c2" "$tmp/store2"
# 3. The binaries: `ucm` runs its libtorch subcommands through PREFIX/libexec/ucm/ucm-torch.
"$tmp/prefix/bin/ucm" --version >/dev/null
if [ -e "$build/libexec/ucm/ucm-torch" ]; then
  test -x "$tmp/prefix/libexec/ucm/ucm-torch" || { echo "libexec/ucm/ucm-torch not installed" >&2; exit 1; }
  # Captured first: `| grep -q` may close the pipe before ucm has written all of its help, and
  # the SIGPIPE then fails the pipeline under pipefail.
  help=$("$tmp/prefix/bin/ucm" precompute --help) || { echo "installed ucm precompute --help failed" >&2; exit 1; }
  grep -q "Usage: ucm precompute" <<<"$help" \
    || { echo "installed ucm precompute --help did not reach ucm-torch" >&2; exit 1; }
fi
echo "check_install: OK"
