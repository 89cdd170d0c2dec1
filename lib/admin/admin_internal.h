// lib/admin/admin_internal.h: helpers shared by the admin commands. Internal; not installed.
#pragma once
#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ucm/format/format.h"
#include "ucm/core/data_file_reader.h"
#include "ucm/core/index.h"
#include "ucm/core/index_open.h"
#include "ucm/core/ns_value.h"
#include "ucm/admin.h"
#include "ucm/namespace.h"
#include "ucm/status.h"
#include "ucm/types.h"

namespace ucm::admin {

/// ISO-8601 UTC with milliseconds ("2026-01-02T03:04:05.678Z"); "-" for 0.
std::string format_time_ms(uint64_t ms);
/// Age of time `ms` as seen at `now_ms` (both ms since the epoch): "just now" (< 1 s),
/// "45 s ago" (< 120 s), "17 min ago" (< 120 min), "5 h ago" (< 48 h), "3 d ago"; "-" for 0;
/// "in the future" when ms > now_ms by a second or more (clock skew between hosts).
std::string format_age(uint64_t ms, uint64_t now_ms);
std::string format_bytes(uint64_t b);

/// A namespace as stored in the index (§5.2): its id, descriptor and the full JSON value.
struct NsInfo {
  NamespaceId id{};
  NamespaceDesc desc;
  NsIndexValue value;  ///< the index value: descriptor + blocks, bytes, record, attachments
};
Status load_namespaces(const Index& idx, std::vector<NsInfo>* out);
/// By name or 32-hex id. InvalidArgument listing the known names when absent.
Status resolve_namespace(const std::vector<NsInfo>& all, const std::string& name_or_id,
                         const NsInfo** out);

/// The namespace whose id seeds the block hash chain: extra.hash_seed_namespace when present
/// (store_v1.md §7.1), else the namespace itself.
NamespaceId hash_seed_namespace(const NamespaceDesc& desc, const NamespaceId& id);
/// root_hash(hash_seed_namespace(desc, id)): the parent of the first block of every chain.
BlockHash chain_root(const NamespaceDesc& desc, const NamespaceId& id);

/// The superblock (checked first: Version / Corruption / not a store), then a read-only view of
/// the index (ucm::ReaderIndex, lib/src/index_open.h: needs no write access to the store).
class ReaderView {
 public:
  static Status Open(const std::string& store, std::unique_ptr<ReaderView>* out);
  Index& index() { return ri_->index(); }
  const fmt::Superblock& superblock() const { return sb_; }

 private:
  fmt::Superblock sb_;
  std::unique_ptr<ReaderIndex> ri_;
};

/// The writer side: superblock check, WriterLock, primary index (which must exist).
struct WriterIndex {
  fmt::Superblock sb;
  std::unique_ptr<fmt::WriterLock> lock;
  std::unique_ptr<Index> idx;
  /// write_buffer_budget: see Index::OpenPrimary (gc bounds the index's memtables with it).
  static Status Open(const std::string& store, std::unique_ptr<WriterIndex>* out, uint64_t write_buffer_budget = 0);
};

/// Reads and verifies the NS_ATTACHMENT record `name` of `ns` at (file, offset).
Status read_attachment(const std::string& store, const NamespaceId& ns, const std::string& name,
                       uint32_t file, uint64_t offset, uint64_t length, uint64_t checksum,
                       std::string* out);

/// Calls a ProgressFn at most once a second.
class Progress {
 public:
  explicit Progress(const ProgressFn& fn) : fn_(fn) {}
  void tick(const std::function<std::string()>& line, bool force = false);

 private:
  const ProgressFn& fn_;
  std::chrono::steady_clock::time_point last_{};
};

/// Converts one payload between dtypes (round to nearest even). n = element count.
/// `out` must hold n * dtype_size(to) bytes.
void convert_dtype(const void* in, DType from, void* out, DType to, size_t n);

/// Key "ns||hash" (32 bytes) for maps.
inline std::string bkey(const NamespaceId& ns, const BlockHash& h) { return fmt::block_key(ns, h); }

/// Block record JSON (inspect --block).
nlohmann::ordered_json block_record_json(const NsInfo& ns, const BlockHash& h,
                                         const fmt::BlockRecord& r);

/// `migrate --upgrade`: rewrites an older format version in place (upgrade.cc).
Status upgrade_store(const std::string& path, MigrateReport* rep);

// The single-store commands (a version 1-2 store, or one shard) and their sharded drivers
// (store_v1.md §11; shards.cc, gc_shards.cc). The public entry points dispatch on root_kind().
Status inspect_single(const std::string& path, const InspectOptions& opts, InspectReport* rep);
Status gc_single(const std::string& path, const GcOptions& opts, GcReport* rep);
Status migrate_single(const std::string& src, const std::string& dst, const MigrateOptions& opts,
                      MigrateReport* rep);
Status gc_sharded(const std::string& root, const GcOptions& opts, GcReport* rep);
/// `ucm migrate STORE --to-sharded` (store_v1.md §11.4).
Status upgrade_to_sharded(const std::string& path, const std::string& shard_name, MigrateReport* rep);
/// Adds the counters of `from` (one shard's run) to `to`.
void add_gc_counters(GcReport* to, const GcReport& from);
/// Adds one shard's hand-off to a live writer (store_v1.md §11.5) to the totals `to`.
void add_handoff(GcHandoff* to, const GcHandoff& from);

/// Rebuilds STORE/index from the data files (build --rebuild-index).
Status rebuild_index(const std::string& path, const BuildOptions& opts, BuildReport* report);

}  // namespace ucm::admin
