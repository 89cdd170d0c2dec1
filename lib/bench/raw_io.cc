// bench/raw_io.cc: raw O_DIRECT sequential-write and random-read passes (see raw_io.h).
#include "ucm/bench/raw_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "ucm/bench/bench_util.h"

#ifdef UCM_HAVE_LIBURING
#include <liburing.h>
#endif

namespace ucm::bench {
namespace {

constexpr uint64_t kAlign = 4096;

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBuf = std::unique_ptr<uint8_t, AlignedFree>;

AlignedBuf alloc_aligned(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, kAlign, n) != 0) return AlignedBuf(nullptr);
  return AlignedBuf(static_cast<uint8_t*>(p));
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Status open_direct(const std::string& path, int flags, Fd* f) {
  f->fd = ::open(path.c_str(), flags | O_DIRECT | O_CLOEXEC, 0644);
  if (f->fd < 0) {
    int err = errno;
    if (err == EINVAL) {
      return Status::InvalidArgument("cannot open " + path +
                                     " with O_DIRECT: the file system does not support direct "
                                     "I/O (tmpfs?); pass --store with a directory on the disk "
                                     "to measure");
    }
    return Status::FromErrno(err, "open " + path);
  }
  return Status::OK();
}

struct Plan {
  bool write = false;
  uint64_t block_bytes = 0;
  uint64_t count = 0;
  uint32_t qd = 16;
  std::vector<uint64_t> offsets;  // offsets[i] of I/O i
};

Status run_threads(int fd, const Plan& plan, std::vector<AlignedBuf>& bufs) {
  std::atomic<uint64_t> next{0};
  std::mutex mu;
  Status first;
  std::vector<std::thread> th;
  for (uint32_t t = 0; t < plan.qd; ++t) {
    th.emplace_back([&, t] {
      uint8_t* buf = bufs[t].get();
      for (;;) {
        uint64_t i = next.fetch_add(1);
        if (i >= plan.count) return;
        uint64_t off = plan.offsets[i];
        ssize_t r = plan.write ? ::pwrite(fd, buf, plan.block_bytes, static_cast<off_t>(off))
                               : ::pread(fd, buf, plan.block_bytes, static_cast<off_t>(off));
        if (r != static_cast<ssize_t>(plan.block_bytes)) {
          int err = r < 0 ? errno : EIO;
          std::lock_guard<std::mutex> lk(mu);
          if (first.ok()) {
            first = Status::FromErrno(err, std::string(plan.write ? "pwrite" : "pread") +
                                               " at offset " + std::to_string(off) +
                                               (r >= 0 ? " (short transfer)" : ""));
          }
          next.store(plan.count);
          return;
        }
      }
    });
  }
  for (auto& t : th) t.join();
  return first;
}

#ifdef UCM_HAVE_LIBURING
/// Returns NotSupported when the ring cannot be created (caller falls back to threads).
Status run_uring(int fd, const Plan& plan, std::vector<AlignedBuf>& bufs) {
  io_uring ring;
  int rc = io_uring_queue_init(plan.qd * 2, &ring, 0);
  if (rc < 0) return Status::NotSupported("io_uring_queue_init: " + std::string(strerror(-rc)));
  std::vector<uint32_t> free_slots;
  for (uint32_t s = 0; s < plan.qd; ++s) free_slots.push_back(plan.qd - 1 - s);
  uint64_t submitted = 0, completed = 0;
  Status st;
  while (completed < plan.count) {
    uint32_t queued = 0;
    while (st.ok() && submitted < plan.count && !free_slots.empty()) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (!sqe) break;
      uint32_t slot = free_slots.back();
      free_slots.pop_back();
      uint64_t off = plan.offsets[submitted];
      if (plan.write) {
        io_uring_prep_write(sqe, fd, bufs[slot].get(), static_cast<unsigned>(plan.block_bytes), off);
      } else {
        io_uring_prep_read(sqe, fd, bufs[slot].get(), static_cast<unsigned>(plan.block_bytes), off);
      }
      io_uring_sqe_set_data64(sqe, (static_cast<uint64_t>(slot) << 48) | submitted);
      ++submitted;
      ++queued;
    }
    if (queued) {
      rc = io_uring_submit(&ring);
      if (rc < 0) {
        io_uring_queue_exit(&ring);
        return Status::FromErrno(-rc, "io_uring_submit");
      }
    }
    if (completed == submitted) break;  // error stopped submission and everything drained
    io_uring_cqe* cqe = nullptr;
    rc = io_uring_wait_cqe(&ring, &cqe);
    if (rc < 0) {
      if (rc == -EINTR) continue;
      io_uring_queue_exit(&ring);
      return Status::FromErrno(-rc, "io_uring_wait_cqe");
    }
    unsigned head;
    unsigned seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      uint64_t data = io_uring_cqe_get_data64(cqe);
      uint32_t slot = static_cast<uint32_t>(data >> 48);
      uint64_t idx = data & ((1ull << 48) - 1);
      if (cqe->res != static_cast<int>(plan.block_bytes) && st.ok()) {
        int err = cqe->res < 0 ? -cqe->res : EIO;
        st = Status::FromErrno(err, std::string(plan.write ? "write" : "read") + " at offset " +
                                        std::to_string(plan.offsets[idx]) +
                                        (cqe->res >= 0 ? " (short transfer)" : ""));
      }
      free_slots.push_back(slot);
      ++completed;
      ++seen;
    }
    io_uring_cq_advance(&ring, seen);
    if (!st.ok() && completed == submitted) break;
  }
  io_uring_queue_exit(&ring);
  return st;
}
#endif

Status run_plan(int fd, const Plan& plan, const RawIoEngine& engine, double* seconds,
                std::string* engine_used) {
  std::vector<AlignedBuf> bufs;
  std::mt19937_64 rng(12345);
  for (uint32_t s = 0; s < plan.qd; ++s) {
    bufs.push_back(alloc_aligned(plan.block_bytes));
    if (!bufs.back()) return Status::IOError("out of memory for " + std::to_string(plan.qd) +
                                             " I/O buffers of " + std::to_string(plan.block_bytes) +
                                             " bytes");
    // Random bytes, so a compressing or deduplicating device cannot flatter the figure.
    auto* w = reinterpret_cast<uint64_t*>(bufs.back().get());
    for (uint64_t k = 0; k < plan.block_bytes / 8; ++k) w[k] = rng();
  }
  double t0 = now_s();
  Status st;
#ifdef UCM_HAVE_LIBURING
  if (!engine.force_threads) {
    st = run_uring(fd, plan, bufs);
    if (st.code() != Code::kNotSupported) {
      *seconds = now_s() - t0;
      *engine_used = "io_uring";
      return st;
    }
    t0 = now_s();
  }
#endif
  st = run_threads(fd, plan, bufs);
  *seconds = now_s() - t0;
  *engine_used = "threads";
  return st;
}

Status check_args(uint64_t block_bytes, uint32_t qd) {
  if (block_bytes == 0 || block_bytes % kAlign != 0) {
    return Status::InvalidArgument("raw I/O block size " + std::to_string(block_bytes) +
                                   " is not a positive multiple of 4096 (O_DIRECT needs page "
                                   "multiples)");
  }
  if (qd == 0 || qd > 4096) {
    return Status::InvalidArgument("queue depth " + std::to_string(qd) + " not in [1, 4096]");
  }
  return Status::OK();
}

}  // namespace

std::vector<uint64_t> distinct_block_offsets(uint64_t nblocks, uint64_t reads, uint64_t block_bytes, uint64_t seed) {
  std::vector<uint64_t> out;
  out.reserve(reads);
  std::vector<uint64_t> perm(nblocks);
  std::mt19937_64 rng(seed);
  while (out.size() < reads) {
    for (uint64_t k = 0; k < nblocks; ++k) perm[k] = k;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (uint64_t k = 0; k < nblocks && out.size() < reads; ++k) out.push_back(perm[k] * block_bytes);
  }
  return out;
}

Status raw_seq_write(const std::string& path, uint64_t block_bytes, uint64_t blocks,
                     uint32_t queue_depth, const RawIoEngine& engine, RawIoResult* out,
                     std::string* engine_used) {
  Status st = check_args(block_bytes, queue_depth);
  if (!st.ok()) return st;
  Fd f;
  st = open_direct(path, O_WRONLY | O_CREAT | O_TRUNC, &f);
  if (!st.ok()) return st;
  uint64_t total = block_bytes * blocks;
  int rc = posix_fallocate(f.fd, 0, static_cast<off_t>(total));
  if (rc != 0 && rc != EOPNOTSUPP) return Status::FromErrno(rc, "fallocate " + path);
  Plan plan;
  plan.write = true;
  plan.block_bytes = block_bytes;
  plan.count = blocks;
  plan.qd = queue_depth;
  plan.offsets.resize(blocks);
  for (uint64_t i = 0; i < blocks; ++i) plan.offsets[i] = i * block_bytes;
  double io_s = 0;
  st = run_plan(f.fd, plan, engine, &io_s, engine_used);
  if (!st.ok()) return st;
  double t_sync = now_s();
  if (::fdatasync(f.fd) != 0) return Status::FromErrno(errno, "fdatasync " + path);
  out->ios = blocks;
  out->bytes = total;
  out->seconds = io_s + (now_s() - t_sync);  // buffer setup excluded, final fdatasync included
  return Status::OK();
}

Status raw_rand_read(const std::string& path, uint64_t block_bytes, uint64_t reads,
                     uint32_t queue_depth, uint64_t seed, const RawIoEngine& engine,
                     RawIoResult* out, std::string* engine_used) {
  Status st = check_args(block_bytes, queue_depth);
  if (!st.ok()) return st;
  Fd f;
  st = open_direct(path, O_RDONLY, &f);
  if (!st.ok()) return st;
  struct stat sb;
  if (::fstat(f.fd, &sb) != 0) return Status::FromErrno(errno, "stat " + path);
  uint64_t nblocks = static_cast<uint64_t>(sb.st_size) / block_bytes;
  if (nblocks == 0) {
    return Status::InvalidArgument(path + " holds less than one block of " +
                                   std::to_string(block_bytes) + " bytes; write it first");
  }
  Plan plan;
  plan.block_bytes = block_bytes;
  plan.count = reads;
  plan.qd = queue_depth;
  plan.offsets = distinct_block_offsets(nblocks, reads, block_bytes, seed);
  double io_s = 0;
  st = run_plan(f.fd, plan, engine, &io_s, engine_used);
  if (!st.ok()) return st;
  out->ios = reads;
  out->bytes = reads * block_bytes;
  out->seconds = io_s;
  return Status::OK();
}

Status raw_rand_read_buffered(const std::string& path, uint64_t block_bytes, uint64_t reads, uint32_t threads,
                              bool readahead, uint64_t seed, RawIoResult* out) {
  if (block_bytes == 0 || threads == 0) return Status::InvalidArgument("block size and threads must be positive");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  struct stat sb;
  if (::fstat(fd, &sb) != 0) {
    const int e = errno;
    ::close(fd);
    return Status::FromErrno(e, "stat " + path);
  }
  const uint64_t nblocks = static_cast<uint64_t>(sb.st_size) / block_bytes;
  if (nblocks == 0) {
    ::close(fd);
    return Status::InvalidArgument(path + " holds less than one block; write it first");
  }
  (void)::fdatasync(fd);
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  // POSIX_FADV_RANDOM turns the kernel's readahead off for this open file: each pread reads
  // its own pages only (with it on, a random 360 KiB read pulls in up to read_ahead_kb more).
  (void)posix_fadvise(fd, 0, 0, readahead ? POSIX_FADV_NORMAL : POSIX_FADV_RANDOM);
  const std::vector<uint64_t> offsets = distinct_block_offsets(nblocks, reads, block_bytes, seed);
  std::atomic<uint64_t> next{0};
  std::atomic<int> err{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (uint32_t t = 0; t < threads; ++t)
    ts.emplace_back([&] {
      std::vector<uint8_t> buf(block_bytes);
      for (;;) {
        const uint64_t i = next.fetch_add(1);
        if (i >= reads || err.load()) return;
        uint64_t done = 0;
        while (done < block_bytes) {
          const ssize_t n = ::pread(fd, buf.data() + done, block_bytes - done, off_t(offsets[i] + done));
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) {
            err.store(n < 0 ? errno : EIO);
            return;
          }
          done += uint64_t(n);
        }
      }
    });
  for (auto& t : ts) t.join();
  out->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  if (err.load()) return Status::FromErrno(err.load(), "buffered read of " + path);
  out->ios = reads;
  out->bytes = reads * block_bytes;
  return Status::OK();
}

}  // namespace ucm::bench
