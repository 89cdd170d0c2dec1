// tests/fuzz/fuzz_common.h: helpers shared by the libFuzzer targets (docs/fuzzing.md).
//
// FUZZ_CHECK(cond) aborts with a message when a parser breaks its contract, so that libFuzzer
// reports the input as a crash. Exceptions other than the one a target catches are left to
// escape: std::terminate aborts, and libFuzzer reports that too.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#define FUZZ_CHECK(cond)                                                                          \
  do {                                                                                            \
    if (!(cond)) ::ucm_fuzz::fail(__FILE__, __LINE__, #cond, "");                                 \
  } while (0)
#define FUZZ_CHECK_MSG(cond, msg)                                                                 \
  do {                                                                                            \
    if (!(cond)) ::ucm_fuzz::fail(__FILE__, __LINE__, #cond, (msg));                              \
  } while (0)

namespace ucm_fuzz {

[[noreturn]] inline void fail(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "\nFUZZ CONTRACT VIOLATION at %s:%d: %s%s%s\n", file, line, cond, msg.empty() ? "" : ": ",
               msg.c_str());
  std::fflush(stderr);
  std::abort();
}

/// A private scratch directory for the process (on /dev/shm when it is writable, else $TMPDIR or
/// /tmp), removed at exit. Targets write the input there when the parser reads files.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string base = "/dev/shm";
    if (::access(base.c_str(), W_OK) != 0) {
      const char* t = std::getenv("TMPDIR");
      base = t && *t ? t : "/tmp";
    }
    std::string templ = base + "/ucm-fuzz-XXXXXX";
    if (!::mkdtemp(templ.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    static const std::string keep = templ;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(keep, ec);
    });
    return templ;
  }();
  return dir;
}

/// Writes `len` bytes to `path` (truncating). Aborts on failure: the harness, not the parser,
/// is broken then.
inline void write_file(const std::string& path, const void* data, size_t len) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::perror(path.c_str());
    std::abort();
  }
  const auto* p = static_cast<const uint8_t*>(data);
  size_t done = 0;
  while (done < len) {
    ssize_t w = ::write(fd, p + done, len - done);
    if (w <= 0) {
      std::perror(path.c_str());
      std::abort();
    }
    done += size_t(w);
  }
  ::close(fd);
}

}  // namespace ucm_fuzz
