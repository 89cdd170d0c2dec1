// ucm/core/store_shared.h: StoreShared, the state a store handle's reader (StoreReader,
// store_reader.h) and writer (StoreWriter, store_writer.h) share. Internal to libucm.
//
// Lifetime: one per open single store, owned by the StoreImpl facade (store_impl.h). Its
// init() fills it (index, files, pool, the table) before the reader or writer runs; it is
// destroyed after both. Thread rules: path, opts, index, files and pool are set once by init()
// and only read afterwards; the fingerprint table and applied_seq change under table_mu held
// exclusively and are read under it shared; the namespace cache has its own mutex; metrics,
// access, files and pool are thread-safe themselves.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "ucm/core/access_log.h"
#include "ucm/core/corrupt_reports.h"
#include "ucm/core/data_file_reader.h"
#include "ucm/core/fptable.h"
#include "ucm/core/index.h"
#include "ucm/core/metrics.h"
#include "ucm/core/task_impl.h"
#include "ucm/core/thread_pool.h"
#include "ucm/format/format.h"
#include "ucm/store.h"

namespace ucm::detail {

inline uint64_t elapsed_ns(Clock::time_point t0) {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

struct StoreShared {
  StoreShared(std::string p, const OpenOptions& o) : path(std::move(p)), opts(o) {}
  StoreShared(const StoreShared&) = delete;
  StoreShared& operator=(const StoreShared&) = delete;

  bool read_only() const { return opts.mode == OpenOptions::Mode::kReadOnly; }

  /// The descriptor of namespace `ns`, from the cache or the index (then cached). NotFound
  /// (with the store and how to register it) when the index has no such namespace; Corruption
  /// when its descriptor does not parse. No catch-up: a reader retries after refresh().
  Status namespace_desc(const NamespaceId& ns, NamespaceDesc* d);

  const std::string path;
  const OpenOptions opts;
  /// The superblock's format_version at open (2, 4 or 5 for a writer): a version-2 store's writer
  /// writes no token ids and version-2 data file headers (store_v1.md §3.2, §10). A writer steps
  /// 4 to 5 when it registers the first SGLang page namespace (§12.2).
  std::atomic<uint32_t> format_version{0};
  bool records_tokens() const { return format_version >= fmt::kTokensFormatVersion; }
  Index* index = nullptr;                 ///< the facade's primary (writer) or secondary (reader)
  std::unique_ptr<DataFileReader> files;  ///< the open data files, one descriptor each
  std::unique_ptr<ThreadPool> pool;       ///< the I/O threads: load, visit_repr, dump writes
  AccessLog access;                       ///< load recency for gc (STORE/access)
  Metrics metrics;
  CorruptReports corrupt;                 ///< corrupt records loads met, for the writer (§11.6)

  // The lookup table (store_v1.md §8): one fingerprint per indexed block.
  std::shared_mutex table_mu;
  FpTable table;
  uint64_t applied_seq = 0;  ///< the journal sequence the table reflects

 private:
  std::mutex ns_mu_;
  std::map<NamespaceId, NamespaceDesc> ns_cache_;
};

}  // namespace ucm::detail
