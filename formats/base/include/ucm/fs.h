// ucm/fs.h: removing a directory tree without std::filesystem::remove_all.
#pragma once

#include <cstdint>
#include <filesystem>
#include <system_error>

namespace ucm {

/// Removes `path` and, if it is a directory, everything below it, as
/// std::filesystem::remove_all(path, ec) does: symbolic links are removed, never followed; a
/// missing `path` is 0 entries and no error. Returns the entries removed; on the first failure
/// sets `ec` (the errno of the failed call) and returns what was removed until then (the
/// std::filesystem function returns static_cast<uintmax_t>(-1) there; callers here only test `ec`).
///
/// Why not std::filesystem::remove_all: a pip PyTorch's libtorch.so exports its own copy of it,
/// built for an older libstdc++, and an executable that names libtorch before libstdc++ (a C++
/// server that links both, as ucm-torch did) binds every remove_all of the process, libucm's too,
/// to that copy, which crashes through a null pointer (docs/device.md, 2026-11-29). This one is
/// POSIX only (nftw, unlink, rmdir): no symbol another library can take.
uintmax_t remove_tree(const std::filesystem::path& path, std::error_code& ec);

}  // namespace ucm
