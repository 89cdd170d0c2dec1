// formats/base/fs.cc: see ucm/fs.h.
#include "ucm/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ucm {

namespace {

std::error_code last_error() { return {errno, std::generic_category()}; }

// Removes every entry of the directory open at `dfd` (which this closes), depth first, adding
// the entries removed to *n. false with `ec` set at the first failure.
bool clear_dir(int dfd, uintmax_t* n, std::error_code& ec) {
  DIR* d = ::fdopendir(dfd);
  if (!d) {
    ec = last_error();
    ::close(dfd);
    return false;
  }
  const int fd = ::dirfd(d);
  bool ok = true;
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d);
    if (!e) {
      if (errno) ec = last_error(), ok = false;
      break;
    }
    const char* name = e->d_name;
    if (std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0) continue;
    struct stat st {};
    if (::fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed meanwhile by someone else
      ec = last_error(), ok = false;
      break;
    }
    if (S_ISDIR(st.st_mode)) {
      const int sub = ::openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) {
        ec = last_error(), ok = false;
        break;
      }
      if (!clear_dir(sub, n, ec)) {
        ok = false;
        break;
      }
      if (::unlinkat(fd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
        ec = last_error(), ok = false;
        break;
      }
    } else if (::unlinkat(fd, name, 0) != 0 && errno != ENOENT) {
      ec = last_error(), ok = false;
      break;
    }
    ++*n;
  }
  ::closedir(d);
  return ok;
}

}  // namespace

uintmax_t remove_tree(const std::filesystem::path& path, std::error_code& ec) {
  ec.clear();
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) ec = last_error();
    return 0;
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlink(path.c_str()) != 0) {
      if (errno == ENOENT) return 0;
      ec = last_error();
      return 0;
    }
    return 1;
  }
  uintmax_t n = 0;
  const int dfd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) {
    ec = last_error();
    return 0;
  }
  if (!clear_dir(dfd, &n, ec)) return n;
  if (::rmdir(path.c_str()) != 0) {
    if (errno == ENOENT) return n;
    ec = last_error();
    return n;
  }
  return n + 1;
}

}  // namespace ucm
