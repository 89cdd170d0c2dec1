// lib/src/corrupt_reports.cc: a handle's corrupt blocks, handed to the store's live writer as
// removal requests (store_v1.md §11.6; ucm/core/corrupt_reports.h).
#include "ucm/core/corrupt_reports.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "ucm/core/log.h"
#include "ucm/format/format.h"

namespace ucm::detail {

bool CorruptReports::note(const NamespaceId& ns, const BlockHash& hash, uint32_t file, uint64_t offset) {
  std::lock_guard<std::mutex> g(mu_);
  if (seen_.size() >= kMaxRemembered) return false;
  if (!seen_.emplace(ns, hash, file, offset).second) return false;
  pending_.push_back({ns, hash});
  return true;
}

void CorruptReports::flush(const std::string& store, Metrics* m) {
  std::vector<fmt::GcRequestEntry> batch;
  {
    std::lock_guard<std::mutex> g(mu_);
    batch.swap(pending_);
  }
  const std::string dir = fmt::gc_requests_dir(store);
  if (!batch.empty() && write_failures_ < 3) {
    fmt::GcRequest rq;
    const std::string nonce = fmt::new_gc_nonce();
    rq.flags = 0;  // removals only: dead bytes are reclaimed by the next gc
    rq.created_ms = fmt::now_ms();
    rq.expires_ms = rq.created_ms + kExpiresMs;
    rq.requester = fmt::sanitize_shard_name(fmt::host_name()).substr(0, 32) + ":" + std::to_string(::getpid()) + ":" + nonce;
    rq.entries = batch;
    Status s = fmt::make_dirs(dir);
    if (s.ok()) s = fmt::write_file_atomic(dir, nonce + ".req", fmt::encode_gc_request(rq));
    if (s.ok()) {
      write_failures_ = 0;
      outstanding_.push_back(nonce);
      m->corrupt_reported.fetch_add(batch.size(), std::memory_order_relaxed);
      log().warn("store {}: {} corrupt block(s) found by loads (first {}) handed to the store's writer for removal "
                 "(request {}); the next save writes them again",
                 store, batch.size(), to_hex(batch.front().hash), nonce);
    } else {
      ++write_failures_;
      log().warn("store {}: could not hand {} corrupt block(s) to the store's writer ({}){}", store, batch.size(),
                 s.message(), write_failures_ < 3 ? "; retried at the next heartbeat" : "; given up: gc --verify removes them");
      std::lock_guard<std::mutex> g(mu_);
      pending_.insert(pending_.end(), batch.begin(), batch.end());
    }
  } else if (!batch.empty()) {
    m->corrupt_dropped.fetch_add(batch.size(), std::memory_order_relaxed);
  }
  // Answers to earlier requests: the writer leaves <nonce>.done (or .bad); this handle deletes them.
  for (auto it = outstanding_.begin(); it != outstanding_.end();) {
    // Still waiting (.req) or being applied (.work): the writer writes .done before it deletes
    // .work, so once both are gone the answer is there, or the request was refused or discarded.
    if (::access(fmt::gc_request_path(store, *it, ".req").c_str(), F_OK) == 0 ||
        ::access(fmt::gc_request_path(store, *it, ".work").c_str(), F_OK) == 0) {
      ++it;
      continue;
    }
    const std::string done = fmt::gc_request_path(store, *it, ".done");
    std::string text;
    if (fmt::read_small_file(done, &text).ok()) {
      const auto j = nlohmann::json::parse(text, nullptr, false);
      const uint64_t removed = j.is_object() ? j.value("blocks_removed", uint64_t(0)) : 0;
      m->corrupt_removed.fetch_add(removed, std::memory_order_relaxed);
      log().info("store {}: the writer {} removed {} corrupt block(s) of request {}", store,
                 j.is_object() ? j.value("writer", std::string("?")) : std::string("?"), removed, *it);
      ::unlink(done.c_str());
    } else if (::access(fmt::gc_request_path(store, *it, ".bad").c_str(), F_OK) == 0) {
      log().warn("store {}: the writer refused corrupt-block request {} (kept as .bad)", store, *it);
    }  // else expired and discarded by a writer, or cleaned by gc
    it = outstanding_.erase(it);
  }
}

}  // namespace ucm::detail
