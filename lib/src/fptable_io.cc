// lib/src/fptable_io.cc: see ucm/core/fptable_io.h; the file is formats/store/fptable.md.
#include "ucm/core/fptable_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <vector>

#include "ucm/core/index_open.h"
#include "ucm/core/log.h"
#include "ucm/core/ns_value.h"
#include "ucm/format/format.h"

namespace ucm {

Status fptable_scan(const Index& ix, FpTable* t, uint64_t* seq) {
  *seq = ix.journal_seq();
  uint64_t count = 0;
  Status s = ix.scan(Index::Family::kNamespaces, "", [&](std::string_view, std::string_view val) {
    NsIndexValue nv;
    if (ns_value_from_json(val, &nv).ok()) count += nv.blocks;  // sizes the table; a bad value is found elsewhere
    return true;
  });
  if (!s.ok()) return s;
  FpTable out(count);
  s = ix.scan(Index::Family::kBlocks, "", [&](std::string_view k, std::string_view) {
    NamespaceId ns;
    BlockHash h;
    if (fmt::parse_block_key(k, &ns, &h)) out.insert(fmt::block_fingerprint(ns, h));
    return true;
  });
  if (!s.ok()) return s;
  *t = std::move(out);
  return Status::OK();
}

Status fptable_replay(const Index& ix, FpTable* t, uint64_t* seq, uint64_t* replayed, const FpReplayHooks& hooks) {
  uint64_t at = *seq, n = 0;
  bool gap = false, full = false;
  Status s = ix.for_each_journal(at, [&](uint64_t q, const fmt::JournalEntry& e) {
    if (q != at + 1) {
      gap = true;
      return false;
    }
    const uint64_t fp = fmt::block_fingerprint(e.ns, e.hash);
    if (e.op == fmt::JournalOp::kAdd) {
      if (hooks.no_grow && 2 * (t->size() + 1) > t->capacity()) {
        full = true;
        return false;
      }
      t->insert(fp);
    } else {
      t->erase(fp);
    }
    at = q;
    ++n;
    if (hooks.after_entry) hooks.after_entry(n);
    return true;
  });
  if (!s.ok()) return s;
  if (!gap && !full && ix.journal_seq() > at) gap = true;
  *seq = at;
  if (replayed) *replayed += n;
  if (gap)
    return Status::Corruption("stale: the journal no longer holds the entries after sequence " + std::to_string(at) +
                              " (trimmed by gc)");
  if (full) return Status::NotSupported("full: the journal's additions would fill the table past half its slots");
  return Status::OK();
}

namespace {

/// Opens the table file `path` read-only: *fd (the caller closes it) and its *size.
/// NotFound("missing") when there is none.
Status open_table(const std::string& path, int* fd, uint64_t* size) {
  *fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (*fd < 0) return errno == ENOENT ? Status::NotFound("missing") : Status::FromErrno(errno, "open " + path);
  struct stat st;
  if (::fstat(*fd, &st) != 0) {
    const int e = errno;
    ::close(*fd);
    *fd = -1;
    return Status::FromErrno(e, "stat " + path);
  }
  *size = uint64_t(st.st_size);
  return Status::OK();
}

/// fptable.md §4 step 1 after the header and slots checksums: the table belongs to this index
/// and is not newer than it.
Status check_table_index(const fmt::FpTableHeader& h, const std::string& identity, uint64_t index_seq) {
  if (h.index_identity != identity)
    return Status::Corruption("stale: written for index " + h.index_identity + ", the index is " + identity +
                              " (rebuilt or replaced since)");
  if (h.journal_seq > index_seq)
    return Status::Corruption("stale: reflects journal sequence " + std::to_string(h.journal_seq) +
                              ", newer than the index's " + std::to_string(index_seq));
  return Status::OK();
}

}  // namespace

Status fptable_load(const std::string& store, const std::string& identity, uint64_t index_seq, FpTable* t,
                    uint64_t* seq) {
  const std::string path = fmt::fptable_path(store);
  int fd = -1;
  uint64_t size = 0;
  Status os = open_table(path, &fd, &size);
  if (!os.ok()) return os;
  if (size < fmt::kFpTableHeaderBytes) {
    ::close(fd);
    fmt::FpTableHeader h;
    uint8_t zero[fmt::kFpTableHeaderBytes] = {};
    return fmt::decode_fptable_header(zero, size, &h);  // the "shorter than its header" message
  }
  void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  const int merr = errno;
  ::close(fd);
  if (m == MAP_FAILED) return Status::FromErrno(merr, "map " + path);
  auto fail = [&](Status s) {
    ::munmap(m, size);
    return s;
  };
  const auto* p = static_cast<const uint8_t*>(m);
  fmt::FpTableHeader h;
  Status s = fmt::decode_fptable_header(p, size, &h);
  if (!s.ok()) return fail(s);
  if (fmt::xxh3(p + fmt::kFpTableHeaderBytes, 8 * h.capacity) != h.slots_checksum)
    return fail(Status::Corruption("corrupt: slots checksum mismatch"));
  s = check_table_index(h, identity, index_seq);
  if (!s.ok()) return fail(s);
  ::madvise(m, size, MADV_RANDOM);
  auto* slots = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(m) + fmt::kFpTableHeaderBytes);
  *t = FpTable::Adopt(m, size, slots, h.capacity, h.count);
  *seq = h.journal_seq;
  return Status::OK();
}

Status fptable_file_seq(const std::string& store, const std::string& identity, uint64_t* seq) {
  const std::string path = fmt::fptable_path(store);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? Status::NotFound("missing") : Status::FromErrno(errno, "open " + path);
  struct stat st;
  std::vector<uint8_t> head(fmt::kFpTableHeaderBytes);
  size_t got = 0;
  Status s = ::fstat(fd, &st) == 0 ? fmt::pread_full(fd, head.data(), head.size(), 0, &got, path)
                                   : Status::FromErrno(errno, "stat " + path);
  ::close(fd);
  if (!s.ok()) return s;
  fmt::FpTableHeader h;
  s = fmt::decode_fptable_header(head.data(), uint64_t(st.st_size), &h);
  if (!s.ok()) return s;
  if (h.index_identity != identity) return Status::Corruption("stale: written for another index");
  *seq = h.journal_seq;
  return Status::OK();
}

Status fptable_save(const std::string& store, const uint64_t* slots, size_t capacity, size_t count, uint64_t seq,
                    const std::string& identity) {
  const std::string tmp = fmt::tmp_dir(store) + "/fptable." + process_unique_name();
  Status s = fmt::make_dirs(fmt::tmp_dir(store));
  if (!s.ok()) return s;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno(errno, "create " + tmp);
  fmt::FpTableHeader h;
  h.capacity = capacity;
  h.count = count;
  h.journal_seq = seq;
  h.created_ms = fmt::now_ms();
  h.slots_checksum = fmt::xxh3(slots, 8 * capacity);
  h.index_identity = identity;
  std::vector<uint8_t> head(fmt::kFpTableHeaderBytes);
  fmt::encode_fptable_header(h, head.data());
  s = fmt::pwrite_full(fd, head.data(), head.size(), 0, tmp);
  if (s.ok()) s = fmt::pwrite_full(fd, slots, 8 * capacity, fmt::kFpTableHeaderBytes, tmp);
  if (s.ok() && ::fdatasync(fd) != 0) s = Status::FromErrno(errno, "fdatasync " + tmp);
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), fmt::fptable_path(store).c_str()) != 0)
    s = Status::FromErrno(errno, "rename " + tmp + " to " + fmt::fptable_path(store));
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  return fmt::fsync_dir(store);
}

namespace {

/// XXH3-64 of the `len` bytes of fd from `off`, read sequentially through a 1 MiB buffer.
Status checksum_range(int fd, uint64_t off, uint64_t len, const std::string& where, uint64_t* out) {
  XXH3_state_t* st = XXH3_createState();
  if (!st) return Status::Internal("out of memory checksumming " + where);
  XXH3_64bits_reset(st);
  std::vector<uint8_t> buf(1u << 20);
  Status s;
  for (uint64_t done = 0; done < len && s.ok();) {
    const size_t want = size_t(std::min<uint64_t>(buf.size(), len - done));
    size_t got = 0;
    s = fmt::pread_full(fd, buf.data(), want, off + done, &got, where);
    if (s.ok() && got != want) s = Status::Corruption("corrupt: " + where + " is shorter than its header says");
    if (s.ok()) XXH3_64bits_update(st, buf.data(), want);
    done += want;
  }
  *out = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return s;
}

}  // namespace

Status fptable_update_file(const std::string& store, Index& ix, uint64_t* replayed) {
  *replayed = 0;
  std::string identity;
  Status s = ix.identity(&identity);
  if (!s.ok()) return s;
  const std::string path = fmt::fptable_path(store);
  int in = -1;
  uint64_t size = 0;
  s = open_table(path, &in, &size);
  if (!s.ok()) return s;
  s = fmt::make_dirs(fmt::tmp_dir(store));
  const std::string tmp = fmt::tmp_dir(store) + "/fptable." + process_unique_name();
  const int fd = s.ok() ? ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644) : -1;
  if (s.ok() && fd < 0) s = Status::FromErrno(errno, "create " + tmp);
  // 1. Copy (in the kernel: the bytes never enter this process).
  for (uint64_t done = 0; s.ok() && done < size;) {
    const ssize_t n = ::copy_file_range(in, nullptr, fd, nullptr, size_t(size - done), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) s = n < 0 ? Status::FromErrno(errno, "copy " + path + " to " + tmp) : Status::IOError(path + " shrank while copied");
    else done += uint64_t(n);
  }
  ::close(in);
  void* m = MAP_FAILED;
  auto fail = [&](Status e) {
    if (m != MAP_FAILED) ::munmap(m, size);
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return e;
  };
  if (!s.ok()) return fail(s);
  // 2. The checks of fptable_load, on the copy.
  std::vector<uint8_t> head(fmt::kFpTableHeaderBytes);
  size_t got = 0;
  s = fmt::pread_full(fd, head.data(), std::min<uint64_t>(head.size(), size), 0, &got, tmp);
  fmt::FpTableHeader h;
  if (s.ok()) s = fmt::decode_fptable_header(head.data(), size, &h);
  if (!s.ok()) return fail(s);
  uint64_t sum = 0;
  s = checksum_range(fd, fmt::kFpTableHeaderBytes, 8 * h.capacity, tmp, &sum);
  if (!s.ok()) return fail(s);
  if (sum != h.slots_checksum) return fail(Status::Corruption("corrupt: slots checksum mismatch"));
  s = check_table_index(h, identity, ix.journal_seq());
  if (!s.ok()) return fail(s);
  // 3. Replay into a shared mapping of the copy. Every slot touched maps pages of the page cache
  // into this process (a fault maps up to 16 pages around it: fault-around); MADV_DONTNEED every
  // kBatch entries takes them out again (a shared file mapping's dirty pages stay dirty in the
  // page cache), so the mapping adds at most kBatch x 64 KiB = 16 MiB to the RSS.
  m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return fail(Status::FromErrno(errno, "map " + tmp));
  ::madvise(m, size, MADV_RANDOM);
  auto* slots = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(m) + fmt::kFpTableHeaderBytes);
  FpTable t = FpTable::Adopt(nullptr, 0, slots, h.capacity, h.count);  // the mapping stays ours
  constexpr uint64_t kBatch = 256;
  uint64_t at = h.journal_seq;
  FpReplayHooks hooks;
  hooks.no_grow = true;  // growing would move the table onto the heap
  hooks.after_entry = [&](uint64_t n) {
    if (n % kBatch == 0) ::madvise(m, size, MADV_DONTNEED);
  };
  s = fptable_replay(ix, &t, &at, replayed, hooks);
  if (!s.ok()) return fail(s);
  const uint64_t count = t.size();
  t = FpTable(0);
  if (::munmap(m, size) != 0) return fail(Status::FromErrno(errno, "unmap " + tmp));
  m = MAP_FAILED;
  // 4. New header: checksum of the slots as written, read back sequentially.
  s = checksum_range(fd, fmt::kFpTableHeaderBytes, 8 * h.capacity, tmp, &sum);
  if (!s.ok()) return fail(s);
  h.count = count;
  h.journal_seq = at;
  h.created_ms = fmt::now_ms();
  h.slots_checksum = sum;
  fmt::encode_fptable_header(h, head.data());
  s = fmt::pwrite_full(fd, head.data(), head.size(), 0, tmp);
  if (s.ok() && ::fdatasync(fd) != 0) s = Status::FromErrno(errno, "fdatasync " + tmp);
  if (!s.ok()) return fail(s);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    s = Status::FromErrno(errno, "rename " + tmp + " to " + path);
    ::unlink(tmp.c_str());
    return s;
  }
  return fmt::fsync_dir(store);
}

Status fptable_open(const std::string& store, Index& ix, bool may_save, FpTable* t, uint64_t* seq,
                    FpTableOpenInfo* info) {
  const auto t0 = std::chrono::steady_clock::now();
  *info = FpTableOpenInfo{};
  std::string identity;
  Status s = ix.identity(&identity);
  if (!s.ok()) may_save = false;  // a table needs its index's identity: rebuild, save nothing
  uint64_t index_seq = ix.journal_seq();
  Status why = s.ok() ? fptable_load(store, identity, index_seq, t, seq)
                      : Status::Corruption("unusable: " + s.message());
  if (why.code() == Code::kCorruption && !ix.is_primary() && why.message().find("newer than the index") != std::string::npos) {
    (void)ix.try_catch_up();  // the writer saved after our catch-up: look again
    index_seq = ix.journal_seq();
    why = fptable_load(store, identity, index_seq, t, seq);
  }
  if (why.ok()) {
    why = fptable_replay(ix, t, seq, &info->replayed);
    info->loaded = why.ok();
  }
  if (!info->loaded) {
    info->reason = why.message();
    s = fptable_scan(ix, t, seq);
    if (!s.ok()) return s;
  }
  info->should_save = may_save && (!info->loaded || info->replayed >= kFpTableSaveEntries);
  info->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!info->loaded) {
    const bool quiet = why.code() == Code::kNotFound && t->size() == 0;  // a new store
    const auto level = quiet ? spdlog::level::debug
                       : why.code() == Code::kNotFound ? spdlog::level::info
                                                       : spdlog::level::warn;
    log().log(level, "store {}: fingerprint table {} {}; rebuilt from the index ({} blocks, {:.2f} s){}", store,
              fmt::fptable_path(store), why.message(), t->size(), info->seconds,
              info->should_save ? "; it is saved in the background" : "");
  }
  return Status::OK();
}

}  // namespace ucm
