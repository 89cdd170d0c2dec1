// ucm/admin.h: store administration (ucm build / inspect / gc / migrate), as library calls.
// The `ucm` binary only parses arguments and calls these; tests call them in-process.
// Every report renders as JSON (to_json) and as human text (to_text).
// Format: formats/store/store_v1.md. CLI reference and exit codes: docs/cli.md.
//
// Changes from the first draft of this header (all additive):
//  - every options struct has `progress` (a callback for progress lines, never on stdout);
//  - InspectReport::corrupt is a list of CorruptBlock {ns_hex, block_hex, reason};
//  - InspectReport has last-access percentiles; NamespaceStats has the model dims;
//  - GcOptions::verify (corrupt-block removal by a full verify pass); GcReport has more counters;
//  - StoreConfig + load_config (configs/store.yaml), exit_code() (CLI exit-code mapping).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ucm/status.h"
#include "ucm/types.h"

namespace ucm::admin {

/// Receives one human-readable progress line (no trailing newline). Called from the calling
/// thread, at most a few times per second. Null = no progress.
using ProgressFn = std::function<void(const std::string& line)>;

/// Process exit codes of the `ucm` binary (docs/cli.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,        ///< any error; the message on stderr says what and what to do
  kExitUsage = 2,        ///< bad command line (CLI11)
  kExitCorruption = 3,   ///< inspect --verify found corrupt blocks (or a corrupt superblock)
  kExitBusy = 4,         ///< another writer holds the store
  kExitVersion = 5,      ///< the store's format version is newer than this ucm supports
  kExitDiffer = 6,       ///< tokenize --compare: some document's ids differ from (or are missing in) the given ids
};
/// OK -> 0, Corruption -> 3, Busy -> 4, Version -> 5, anything else -> 1.
int exit_code(const Status& s);

/// Store settings from a YAML file (configs/store.yaml). Missing keys keep these defaults.
///   io_threads: 8            # block I/O threads of an open handle
///   direct_io: true          # O_DIRECT payload reads when the file system allows it
///   gc: { max_bytes: "2TiB", max_age: "30d", grace: "60s", compact_dead_ratio: 0.5 }
/// Sizes accept parse_bytes syntax (or a plain integer), durations parse_duration syntax.
struct StoreConfig {
  uint32_t io_threads = 8;
  bool direct_io = true;
  std::optional<uint64_t> gc_max_bytes;
  std::optional<uint64_t> gc_max_age_ms;
  uint64_t gc_grace_ms = 60000;
  double gc_compact_dead_ratio = 0.5;
};
/// InvalidArgument names the file and the bad key (unknown keys are errors, to catch typos);
/// IOError if the file cannot be read.
Status load_config(const std::string& path, StoreConfig* out);

// ------------------------------------------------------------------------------------- build
struct BuildOptions {
  std::string config_path;   ///< optional YAML config (configs/store.yaml); empty = defaults
  bool rebuild_index = false;///< rebuild index/ from the data files (store_v1.md §3)
  /// Create a sharded store (format 3, store_v1.md §11): writers on many machines each get a
  /// shard of it. On an existing sharded store nothing changes.
  bool sharded = false;
  ProgressFn progress;
};
struct BuildReport {
  bool created = false;      ///< false: the store already existed and nothing changed
  bool rebuilt = false;      ///< --rebuild-index ran
  std::string format_message;///< e.g. "created store format version 1" / "store exists; unchanged"
  std::string moved_index_to;///< rebuild: where the old index/ was moved (empty if there was none)
  uint64_t blocks_indexed = 0, files_scanned = 0, corrupt_records = 0;  ///< rebuild only
  uint64_t duplicate_records = 0, namespaces = 0, documents = 0, torn_bytes = 0;  ///< rebuild
  /// rebuild: DOCUMENT records not registered because a block of theirs was not recovered
  uint64_t incomplete_documents = 0;
  /// rebuild: valid records skipped because their namespace's NAMESPACE record is lost, or
  /// attachments whose name is unknown
  uint64_t unknown_namespace_records = 0;
  std::string to_json() const;
  std::string to_text() const;
};
/// Creates the store at `path` (missing or empty directory): superblock, LOCK, index with its
/// column families, data/, access/, readers/, tmp/. On an existing store nothing changes
/// (created = false). With rebuild_index: takes the writer lock, moves index/ to
/// tmp/index.broken-<ms> and rebuilds it from the data files alone.
/// Errors: InvalidArgument (path is a non-empty non-store directory or a file; bad config),
/// Busy, Version, Corruption (bad superblock), IOError.
Status build(const std::string& path, const BuildOptions& opts, BuildReport* report);

// ----------------------------------------------------------------------------------- inspect
struct InspectOptions {
  bool verify = false;        ///< read every block (KV + repr) and check checksum + header fields
  std::string block_hex;      ///< show one block's record (32 hex digits)
  std::string ns;             ///< restrict to one namespace (name or id)
  bool docs = false;          ///< list the document registry
  /// --verify: reader threads. Blocks are read in chunks of 65,536, each sorted by file and
  /// offset, so the disk sees near-sequential reads, `threads` at a time.
  uint32_t threads = 8;
  ProgressFn progress;
};
struct NamespaceStats {
  std::string name, id_hex, model_id, dtype, weights_digest, hash_seed_namespace;
  /// SGLang page namespaces (store_v1.md §12.2): the prefix-chain namespace they belong to (32 hex)
  /// and the KV-head range they hold; empty / 0 for other namespaces.
  std::string sglang_pages_of;
  uint32_t sglang_head_begin = 0, sglang_head_end = 0;
  uint64_t blocks = 0, bytes = 0, documents = 0;
  /// Blocks whose record holds their token ids (store_v1.md §3.2); the rest are "tokens unknown".
  uint64_t blocks_with_tokens = 0;
  uint32_t block_size = 0, num_layers = 0, num_kv_heads = 0, head_dim = 0;
};
struct CorruptBlock {
  std::string ns_hex, block_hex;
  std::string reason;         ///< e.g. "kv payload checksum mismatch", "data file 3 missing"
  std::string shard = {};     ///< sharded stores: the shard holding it ("" otherwise)
};
/// gc beside a live writer (store_v1.md §11.5): what gc handed to the running writer of a store
/// (or shard) whose writer lock another process holds: a request in STORE/gc-requests that the
/// writer's handle applies at its next heartbeat and answers.
struct GcHandoff {
  bool requested = false;          ///< a request was written (false: nothing to ask, or a dry run)
  bool answered = false;           ///< the writer applied it and answered within writer_wait_ms
  /// "applied", "nothing to remove", "dry run", "no answer: withdrawn" (never applied),
  /// "no answer: claimed" (the writer took it and is applying it; its answer stays in
  /// gc-requests/<nonce>.done), "refused: <why>" (the writer renamed it .bad)
  std::string outcome;
  std::string holder;              ///< who holds the writer lock (gc's Busy message)
  std::string nonce;               ///< the request's name in gc-requests/
  std::string writer;              ///< the answering writer, "host:pid"
  uint64_t blocks_requested = 0, blocks_removed = 0, blocks_absent = 0, bytes_removed = 0;
  uint64_t documents_removed = 0, files_retired = 0, files_unlinked = 0, bytes_unlinked = 0;
  std::vector<std::string> errors;  ///< the writer's
};

/// One shard of a sharded store (store_v1.md §11), as inspect and gc see it.
struct ShardSummary {
  std::string name;
  std::string state;          ///< inspect: "ok" or the error; gc: "done", "busy: <holder>",
                              ///< "retired", "error: <message>", "dry run"
  uint64_t blocks = 0, bytes = 0;            ///< inspect: now; gc: before
  uint64_t data_files = 0, data_bytes = 0, dead_bytes = 0;  ///< inspect
  uint64_t verified = 0, corrupt_total = 0;  ///< inspect --verify
  uint64_t evicted_blocks = 0, evicted_bytes = 0, blocks_after = 0, bytes_after = 0;  ///< gc
  bool live_writer = false;   ///< gc: its writer ran; the removals were handed to it
  GcHandoff handoff;          ///< gc: when live_writer
};

struct InspectReport {
  std::string path;
  /// Sharded stores: every field below is the total over the shards (namespaces merged by id;
  /// the access percentiles are the block-weighted mean of the shards' percentiles, so only
  /// approximate), and `shards` has each shard.
  bool sharded = false;
  std::vector<ShardSummary> shards;
  uint32_t format_version = 0;
  std::string created_by;
  uint64_t created_ms = 0;
  uint64_t blocks = 0, bytes = 0;          ///< bytes = payload + repr bytes of present blocks
  uint64_t data_files = 0, data_bytes = 0, dead_bytes = 0, retired_files = 0;
  uint64_t now_ms = 0;                     ///< when inspect ran; to_text() shows ages against it
  /// created_ms / last_access_ms spread over the blocks inspected (ms since the epoch; 0 when
  /// there are none). JSON adds ISO-8601 UTC strings; text shows them as ages ("3 d ago").
  uint64_t oldest_created_ms = 0, newest_created_ms = 0;
  uint64_t oldest_access_ms = 0, newest_access_ms = 0;
  /// last_access_ms percentiles (p10, p50, p90) over the blocks inspected; 0 when none. Exact
  /// up to 1,048,576 blocks; beyond, from a uniform sample of that many (memory stays bounded).
  uint64_t access_p10_ms = 0, access_p50_ms = 0, access_p90_ms = 0;
  std::vector<NamespaceStats> namespaces;
  bool verified_run = false;
  uint64_t verified = 0;                   ///< blocks whose checksums matched
  uint64_t verified_bytes = 0;             ///< payload + repr bytes read and checked
  double verify_seconds = 0;               ///< wall time of the verify pass
  uint64_t corrupt_total = 0;              ///< corrupt blocks found (the list keeps the first 1000)
  std::vector<CorruptBlock> corrupt;
  std::string block_json;                  ///< --block: the record as JSON object text
  bool docs_run = false;
  std::string docs_json;                   ///< --docs: JSON array text
  std::string to_json() const;
  std::string to_text() const;
};
/// Opens the store read-only (works while a writer holds it).
/// Returns Corruption (with the report filled) when --verify found corrupt blocks;
/// InvalidArgument for a malformed --block hash or unknown --namespace; NotFound when the block
/// is absent.
Status inspect(const std::string& path, const InspectOptions& opts, InspectReport* report);

// ---------------------------------------------------------------------------------------- gc
struct GcOptions {
  std::optional<uint64_t> max_bytes;       ///< evict LRU until bytes <= max_bytes
  std::optional<uint64_t> max_age_ms;      ///< evict blocks not accessed within this time
  std::string ns;                          ///< restrict eviction to one namespace
  bool dry_run = false;
  bool unreferenced = false;               ///< evict blocks no registered document reaches
  bool verify = false;                     ///< also remove blocks a full checksum pass finds corrupt
  /// Blocks to remove whatever else happens, taken as corrupt (counted in corrupt_removed, their
  /// descendants with them, their documents unregistered): `ucm inspect --audit --fix` passes the
  /// poisoned blocks it found.
  std::vector<std::pair<NamespaceId, BlockHash>> remove;
  uint64_t grace_ms = 60000;               ///< retired data files are unlinked after this long
  double compact_dead_ratio = 0.5;         ///< compact files whose dead/size exceeds this
  /// Journal entries kept (store_v1.md §5.5): entries with sequence < journal_seq - journal_keep
  /// are deleted. A read-only handle more than this many block changes behind rescans the
  /// block index (O(blocks)) instead of replaying. Tests use small values.
  uint64_t journal_keep = 1000000;
  /// Bring the fingerprint table STORE/fptable up to the index at the end of the run
  /// (formats/store/fptable.md §3), so that the next open replays none of this run's removals.
  /// Memory: a few MiB whatever the table's size (a copy in STORE/tmp/, mapped in batches).
  bool update_fptable = true;
  /// Memory for gc's per-block state (a scratch database in STORE/tmp: write buffers and block
  /// cache); the rest of it is on disk, so gc's memory does not grow with the store (docs/cli.md).
  uint64_t memory_budget = 64ull << 20;
  /// Sharded stores (store_v1.md §11.3): how long the gc lease lasts without renewal, and how
  /// long to wait for another gc's lease before failing with Busy (0: do not wait).
  uint64_t lease_ttl_ms = 60000;
  uint64_t lease_wait_ms = 0;
  /// Sharded stores: before taking shards, gc watches each shard's LOCK mtime this long; a shard
  /// whose writer's heartbeat (LOCK touched every second) moves is left alone even when its
  /// flock is free, because a shared file system can lose flocks (a GlusterFS brick restart
  /// drops them all). 0 skips the check (tests).
  uint64_t writer_heartbeat_ms = 3000;
  /// gc beside a live writer (store_v1.md §11.5): a store (or shard) whose writer lock a running
  /// process holds (or, sharded, whose heartbeat moves) is planned read-only and its removals
  /// are handed to that writer, whose handle applies them at its next heartbeat; gc waits this
  /// long for the answer. 0: no hand-off (Busy, as before).
  uint64_t writer_wait_ms = 30000;
  ProgressFn progress;
};
struct GcReport {
  bool dry_run = false;
  uint64_t blocks_before = 0, bytes_before = 0;
  uint64_t evicted_blocks = 0, evicted_bytes = 0;
  uint64_t evicted_descendants = 0;        ///< of evicted_blocks: children taken with a parent
  uint64_t unreferenced_removed = 0;
  uint64_t orphans_removed = 0, corrupt_removed = 0;
  uint64_t files_compacted = 0, files_retired = 0, files_deleted = 0, bytes_reclaimed = 0;
  uint64_t unreferenced_files_deleted = 0; ///< data files no index entry refers to (crashed writers)
  /// Data files cut back to their indexed size: the unindexed tails that dumps killed before
  /// their index commit left behind (bytes also counted in bytes_reclaimed).
  uint64_t tails_truncated = 0, tail_bytes_truncated = 0;
  uint64_t access_logs_merged = 0, access_logs_deleted = 0, stale_dirs_removed = 0;
  uint64_t journal_trimmed = 0;            ///< journal entries deleted (dry run: would delete)
  bool fptable_updated = false;            ///< STORE/fptable brought up to the index (update_fptable)
  uint64_t fptable_replayed = 0;           ///< journal entries replayed into it
  std::string fptable_skipped;             ///< why it was not ("missing", "stale: ...", ...); "" if updated
  /// Blocks whose parent another shard holds, walked as chain starts (sharded stores)
  uint64_t foreign_roots = 0;
  /// Sharded stores (store_v1.md §11.3): the counters above are totals over the shards gc held;
  /// `shards` has each shard, busy ones (a running writer holds them) untouched.
  bool sharded = false;
  std::string lease_holder;                ///< this run's lease holder id
  std::string lease_taken_over_from;       ///< the expired lease this run took over ("" if none)
  uint64_t shards_busy = 0, shards_retired = 0;
  std::vector<ShardSummary> shards;
  /// Document registry entries removed because a block of theirs is gone (removed by this run,
  /// or missing already): the registry lists only complete documents, so `precompute --resume`
  /// computes these again (dry run: would remove).
  uint64_t documents_removed = 0;
  std::vector<std::string> documents_removed_ids;  ///< "ns_hex:document id" (first 1000)
  uint64_t blocks_after = 0, bytes_after = 0;
  std::vector<std::string> would_evict;    ///< dry run: "ns_hex:block_hex" (first 1000)
  /// gc beside a live writer (store_v1.md §11.5): the writer ran, gc planned read-only and
  /// handed the removals to it (compaction and tail truncation need the writer lock: skipped).
  /// Sharded stores: `shards_handed_off` shards were, each with its `handoff` in `shards`, and
  /// `handoff` holds the totals.
  bool live_writer = false;
  GcHandoff handoff;
  uint64_t shards_handed_off = 0;
  std::string to_json() const;
  std::string to_text() const;
};
/// Takes the writer lock. See docs/cli.md for the step order. When a running process holds it,
/// plans read-only and hands the removals to that writer (store_v1.md §11.5; report.live_writer,
/// report.handoff); Busy (report filled) when it does not answer within writer_wait_ms, or at
/// once, naming the holder, with writer_wait_ms = 0.
/// Sharded stores (store_v1.md §11.3): takes the gc lease (Busy names its holder when
/// lease_wait_ms passes), then the writer lock of every shard it can; evicts in one order across
/// them; retires empty shards whose writer is gone.
Status gc(const std::string& path, const GcOptions& opts, GcReport* report);

// ----------------------------------------------------------------------------------- migrate
struct MigrateOptions {
  std::string ns;            ///< only this namespace (name or id); empty = all
  std::string dtype;         ///< "", "bf16", "fp16": convert payload dtype (new namespace)
  bool upgrade = false;      ///< rewrite SRC in place to the current format (dst unused)
  /// Turn the single-writer store SRC into a sharded store (store_v1.md §11.4) whose one shard,
  /// `shard_name` (default: the host name), holds everything SRC held; nothing is copied.
  bool to_sharded = false;
  std::string shard_name;
  ProgressFn progress;
};
struct MigrateReport {
  uint64_t blocks_copied = 0, blocks_skipped = 0, bytes_copied = 0, namespaces = 0, documents = 0;
  uint64_t attachments = 0;
  std::vector<std::string> dst_namespaces;  ///< ids (hex) written in DST
  bool upgraded = false;
  std::string message;
  std::string to_json() const;
  std::string to_text() const;
};
/// Copies namespaces, attachments, blocks (KV + repr) and documents from `src` (read-only) to
/// `dst` (created if missing; writer lock), skipping blocks `dst` already has.
/// dtype conversion (bf16 <-> fp16, fp32 -> either) writes a new namespace whose `extra` gets
/// {"hash_seed_namespace": "<source id hex>"}, so block hashes stay those of the source
/// (store_v1.md §7.1). Representations are copied unchanged.
/// A sharded SRC (store_v1.md §11) is copied shard by shard into the one store DST.
Status migrate(const std::string& src, const std::string& dst, const MigrateOptions& opts,
               MigrateReport* report);

// ----------------------------------------------------------------------------------- helpers
/// Parses "10G", "512MiB", "1000" (bytes; K/M/G/T/P = 1000^n, Ki/Mi/Gi/Ti/Pi = 1024^n; an optional
/// trailing "B"; case-insensitive units; a decimal fraction like "1.5G" is allowed).
/// InvalidArgument on anything else, on overflow and on negative values.
Status parse_bytes(const std::string& s, uint64_t* out);
/// Parses "30d", "12h", "15m", "45s", "500ms", "1w", and sums like "1h30m"; a bare integer is
/// seconds. InvalidArgument otherwise (the message shows the accepted forms).
Status parse_duration(const std::string& s, uint64_t* out_ms);

}  // namespace ucm::admin
