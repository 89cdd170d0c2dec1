// ucm/admin.h: store administration (ucm build / inspect / gc / migrate), as library calls.
// The `ucm` binary only parses arguments and calls these; tests call them in-process.
// Every report renders as JSON (to_json) and as human text (to_text).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ucm/status.h"

namespace ucm::admin {

struct BuildOptions {
  std::string config_path;   ///< optional YAML config (configs/store.yaml); empty = defaults
  bool rebuild_index = false;///< rebuild index/ from the data files (store_v1.md §3)
};
struct BuildReport {
  bool created = false;      ///< false: the store already existed and nothing changed
  uint64_t blocks_indexed = 0, files_scanned = 0, corrupt_records = 0;  ///< rebuild only
  std::string to_json() const;
  std::string to_text() const;
};
Status build(const std::string& path, const BuildOptions& opts, BuildReport* report);

struct InspectOptions {
  bool verify = false;        ///< read every block and check its checksum
  std::string block_hex;      ///< show one block's record (32 hex digits)
  std::string ns;             ///< restrict to one namespace (name or id)
  bool docs = false;          ///< list the document registry
};
struct NamespaceStats {
  std::string name, id_hex, model_id, dtype;
  uint64_t blocks = 0, bytes = 0;
  uint32_t block_size = 0;
};
struct InspectReport {
  uint32_t format_version = 0;
  std::string created_by;
  uint64_t created_ms = 0;
  uint64_t blocks = 0, bytes = 0;          ///< bytes = payload + repr bytes of present blocks
  uint64_t data_files = 0, data_bytes = 0, dead_bytes = 0;
  uint64_t oldest_created_ms = 0, newest_created_ms = 0;
  uint64_t oldest_access_ms = 0, newest_access_ms = 0;
  std::vector<NamespaceStats> namespaces;
  bool verified_run = false;
  uint64_t verified = 0;                   ///< blocks whose checksums matched
  std::vector<std::string> corrupt;        ///< "ns_hex:block_hex: reason"
  std::string block_json;                  ///< --block: the record as JSON object text
  std::string docs_json;                   ///< --docs: JSON array text
  std::string to_json() const;
  std::string to_text() const;
};
Status inspect(const std::string& path, const InspectOptions& opts, InspectReport* report);

struct GcOptions {
  std::optional<uint64_t> max_bytes;       ///< evict LRU until bytes <= max_bytes
  std::optional<uint64_t> max_age_ms;      ///< evict blocks not accessed within this time
  std::string ns;                          ///< restrict eviction to one namespace
  bool dry_run = false;
  bool unreferenced = false;               ///< evict blocks no registered document reaches
  uint64_t grace_ms = 60000;               ///< retired data files are unlinked after this long
  double compact_dead_ratio = 0.5;         ///< compact files whose dead/size exceeds this
};
struct GcReport {
  bool dry_run = false;
  uint64_t evicted_blocks = 0, evicted_bytes = 0;
  uint64_t orphans_removed = 0, corrupt_removed = 0;
  uint64_t files_compacted = 0, files_deleted = 0, bytes_reclaimed = 0;
  uint64_t access_logs_merged = 0, stale_dirs_removed = 0;
  uint64_t blocks_after = 0, bytes_after = 0;
  std::string to_json() const;
  std::string to_text() const;
};
Status gc(const std::string& path, const GcOptions& opts, GcReport* report);

struct MigrateOptions {
  std::string ns;            ///< only this namespace (name or id); empty = all
  std::string dtype;         ///< "", "bf16", "fp16": convert payload dtype (new namespace)
  bool upgrade = false;      ///< rewrite SRC in place to the current format (dst unused)
};
struct MigrateReport {
  uint64_t blocks_copied = 0, blocks_skipped = 0, bytes_copied = 0, namespaces = 0, documents = 0;
  bool upgraded = false;
  std::string message;
  std::string to_json() const;
  std::string to_text() const;
};
Status migrate(const std::string& src, const std::string& dst, const MigrateOptions& opts,
               MigrateReport* report);

/// Parses "10G", "512MiB", "1000" (bytes; K/M/G/T = 1000^n, Ki/Mi/Gi/Ti = 1024^n).
Status parse_bytes(const std::string& s, uint64_t* out);
/// Parses "30d", "12h", "15m", "45s", "500ms" into milliseconds.
Status parse_duration(const std::string& s, uint64_t* out_ms);

}  // namespace ucm::admin
