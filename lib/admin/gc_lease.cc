// The gc lease (store_v1.md §11.3): gc/LEASE, changed only under flock(gc/LOCK).
#include "gc_lease.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <random>

#include <nlohmann/json.hpp>

#include "admin_internal.h"
#include "ucm/format/format.h"

namespace ucm::admin {

namespace {

struct Lease {
  std::string holder;
  uint64_t acquired_ms = 0, renewed_ms = 0, expires_ms = 0;
};

/// Holds flock(LOCK_EX) on gc/LOCK for the scope.
class LeaseLock {
 public:
  Status take(const std::string& root) {
    const std::string p = fmt::gc_lock_path(root);
    fd_ = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return Status::FromErrno(errno, "open " + p);
    if (::flock(fd_, LOCK_EX) != 0) return Status::FromErrno(errno, "flock " + p);
    return Status::OK();
  }
  ~LeaseLock() {
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  int fd_ = -1;
};

/// NotFound when there is no lease file; a file that does not parse counts as expired.
Status read_lease(const std::string& root, Lease* l) {
  std::string text;
  const std::string p = fmt::gc_lease_path(root);
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound("no lease");
    return Status::FromErrno(errno, "open " + p);
  }
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, size_t(n));
  const int err = n < 0 ? errno : 0;
  ::close(fd);
  if (err) return Status::FromErrno(err, "read " + p);
  auto j = nlohmann::json::parse(text, nullptr, false);
  *l = Lease();
  if (j.is_object()) {
    l->holder = j.value("holder", "");
    l->acquired_ms = j.value("acquired_ms", uint64_t(0));
    l->renewed_ms = j.value("renewed_ms", uint64_t(0));
    l->expires_ms = j.value("expires_ms", uint64_t(0));
  }
  return Status::OK();
}

Status write_lease(const std::string& root, const Lease& l) {
  nlohmann::json j;
  j["holder"] = l.holder;
  j["acquired_ms"] = l.acquired_ms;
  j["renewed_ms"] = l.renewed_ms;
  j["expires_ms"] = l.expires_ms;
  const std::string text = j.dump() + "\n";
  const std::string tmp = fmt::gc_dir(root) + "/LEASE.tmp-" + l.holder;
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno(errno, "create " + tmp);
  Status s = fmt::pwrite_full(fd, text.data(), text.size(), 0, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = Status::FromErrno(errno, "fsync " + tmp);
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), fmt::gc_lease_path(root).c_str()) != 0)
    s = Status::FromErrno(errno, "rename " + tmp);
  if (s.ok()) s = fmt::fsync_dir(fmt::gc_dir(root));
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

std::string new_holder_id() {
  std::random_device rd;
  char nonce[9];
  std::snprintf(nonce, sizeof nonce, "%08x", unsigned(rd()));
  return fmt::sanitize_shard_name(fmt::host_name()) + ":" + std::to_string(::getpid()) + ":" + nonce;
}

}  // namespace

Status GcLease::Acquire(const std::string& root, uint64_t ttl_ms, uint64_t wait_ms, const ProgressFn& progress,
                        std::unique_ptr<GcLease>* out, std::string* taken_from) {
  taken_from->clear();
  if (ttl_ms < 1000) return Status::InvalidArgument("gc lease ttl must be at least 1 s");
  Status s = fmt::make_dirs(fmt::gc_dir(root));
  if (!s.ok()) return s;
  const std::string me = new_holder_id();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  Progress prog(progress);
  for (;;) {
    Lease cur;
    bool free = false;
    {
      LeaseLock lk;
      s = lk.take(root);
      if (!s.ok()) return s;
      Status r = read_lease(root, &cur);
      const uint64_t now = fmt::now_ms();
      if (r.code() == Code::kNotFound) free = true;
      else if (!r.ok()) return r;
      else if (cur.holder.empty() || cur.expires_ms < now) {
        free = true;
        *taken_from = cur.holder.empty() ? "(unreadable lease)" : cur.holder;
      }
      if (free) {
        Lease mine{me, now, now, now + ttl_ms};
        s = write_lease(root, mine);
        if (!s.ok()) return s;
      }
    }
    if (free) {
      out->reset(new GcLease(root, me, ttl_ms));
      (*out)->renew_ = std::thread([g = out->get()] { g->renew_loop(); });
      return Status::OK();
    }
    const uint64_t now = fmt::now_ms();
    const std::string why = "gc of " + root + " is running: lease held by " + cur.holder + " until " +
                            format_time_ms(cur.expires_ms) + " (" +
                            std::to_string(cur.expires_ms > now ? (cur.expires_ms - now + 999) / 1000 : 0) +
                            " s from now)";
    if (std::chrono::steady_clock::now() >= deadline)
      return Status::Busy(why + "; wait for it, or pass --lease-wait to wait for its lease to end");
    prog.tick([&] { return "waiting: " + why; });
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

void GcLease::renew_loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    cv_.wait_for(l, std::chrono::milliseconds(ttl_ms_ / 4));
    if (stop_) break;
    l.unlock();
    {
      LeaseLock lk;
      Lease cur;
      if (lk.take(root_).ok() && read_lease(root_, &cur).ok()) {
        if (cur.holder != holder_) {
          lost_ = true;
        } else {
          cur.renewed_ms = fmt::now_ms();
          cur.expires_ms = cur.renewed_ms + ttl_ms_;
          (void)write_lease(root_, cur);  // a failed renewal is retried; the lease may expire
        }
      }
    }
    l.lock();
    if (lost_) break;
  }
}

GcLease::~GcLease() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (renew_.joinable()) renew_.join();
  if (lost_) return;
  LeaseLock lk;
  Lease cur;
  if (lk.take(root_).ok() && read_lease(root_, &cur).ok() && cur.holder == holder_) {
    ::unlink(fmt::gc_lease_path(root_).c_str());
    (void)fmt::fsync_dir(fmt::gc_dir(root_));
  }
}

}  // namespace ucm::admin
