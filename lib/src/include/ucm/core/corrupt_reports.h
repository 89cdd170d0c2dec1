// ucm/core/corrupt_reports.h: CorruptReports, how a store handle hands the blocks its loads found
// corrupt to the store's live writer (store_v1.md §11.6). Internal to libucm.
//
// A load that finds a block record failing its checksum (or its size) returns CORRUPTION for
// that block, and the server recomputes it. Without more, the record stays indexed until a gc
// with --verify takes it: every later lookup hits it, every load fails on it, and since a block
// is the prefix of every block chained after it, none of them can hit either. So each corrupt
// record a handle meets is noted here (once per record: namespace, block hash, data file and
// offset), and the handle's background thread writes the noted blocks, once a second at most, as
// a removal request (the format of gc's requests, store_v1.md §11.5, without file retirement)
// into the gc-requests directory of the store or shard that holds them. The writer of that
// store (this handle, another process, or the next one to open it) removes them at its next
// heartbeat; the next save of the prefix writes the block again.
//
// Lifetime: a member of StoreShared; flush() runs on the background thread and at close.
// Thread rules: note() from any thread (the I/O threads); flush() from one thread at a time.
#pragma once
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "ucm/core/metrics.h"
#include "ucm/format/gc_request.h"

namespace ucm::detail {

class CorruptReports {
 public:
  /// Requests not applied within this time are discarded by the writer (it is not waited for).
  static constexpr uint64_t kExpiresMs = 3600 * 1000;
  /// Records remembered as reported; beyond this, new ones are counted as dropped.
  static constexpr size_t kMaxRemembered = 65536;

  /// Notes the corrupt record of block (ns, hash) at (file, offset). Returns true when it is new
  /// (to be handed over at the next flush), false when this record was reported before.
  bool note(const NamespaceId& ns, const BlockHash& hash, uint32_t file, uint64_t offset);

  /// Writes the blocks noted since the last flush as one request into gc-requests/ of `store`
  /// (the single store or shard directory), and collects the answers (.done, .bad) to earlier
  /// requests of this handle: logged, counted in `m`, deleted. Failures are logged and the
  /// blocks kept for the next flush (a read-only file system: given up after 3 tries).
  void flush(const std::string& store, Metrics* m);

 private:
  std::mutex mu_;
  std::set<std::tuple<NamespaceId, BlockHash, uint32_t, uint64_t>> seen_;
  std::vector<fmt::GcRequestEntry> pending_;
  std::vector<std::string> outstanding_;  // nonces of requests written, answer not read yet
  int write_failures_ = 0;
};

}  // namespace ucm::detail
