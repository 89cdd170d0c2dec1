// ucm/store.h: the block store (format: formats/store/store_v1.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ucm/namespace.h"
#include "ucm/status.h"
#include "ucm/types.h"

namespace ucm {

struct OpenOptions {
  enum class Mode { kReadOnly, kReadWrite };
  Mode mode = Mode::kReadOnly;
  /// Read-write only: create the store (like `ucm build`) when `path` is missing or an empty dir.
  bool create_if_missing = false;
  /// Threads doing block I/O for load and dump tasks.
  uint32_t io_threads = 8;
  /// Read payloads with O_DIRECT when the file system allows it (falls back to buffered).
  bool direct_io = true;
  /// Read-only: how often the background thread catches up with the writer (ms). 0 = never
  /// (only explicit refresh()). Visibility bound = this + catch-up time; default keeps it < 5 s.
  uint32_t refresh_interval_ms = 1000;
  /// Read-only: base directory for this handle's private index scratch directory. "" = the
  /// environment variable UCM_READER_DIR, else STORE/readers when writable, else a per-user
  /// local directory ($XDG_RUNTIME_DIR/ucm-readers or /tmp/ucm-readers-<uid>). Read-only opens
  /// need no write access to the store (docs/library.md, "Read-only opens").
  std::string reader_dir;
  /// Sharded stores (store_v1.md §11), read-write: the name of this writer's shard, created on
  /// first use. "" = the environment variable UCM_SHARD, else the host name. Creating a missing
  /// store with a shard name given here or in UCM_SHARD creates a sharded store. Single-writer
  /// stores ignore it.
  std::string shard;
};

/// Index entry of one block (store_v1.md §5.3).
struct BlockInfo {
  NamespaceId ns{};
  BlockHash hash{};
  BlockHash parent{};
  uint32_t token_count = 0;
  uint32_t kv_file = 0;
  uint64_t kv_offset = 0, kv_length = 0, kv_checksum = 0;
  bool has_repr = false;
  bool has_tokens = false;  ///< the KV record holds the block's token ids (store_v1.md §3.2, §5.3)
  uint32_t repr_file = 0;
  uint64_t repr_offset = 0, repr_length = 0, repr_checksum = 0;
  uint64_t created_ms = 0, last_access_ms = 0;
};

/// KV-head range [begin, end) to load; end == 0 means all heads.
struct HeadRange {
  uint32_t begin = 0;
  uint32_t end = 0;
};

/// Where loaded blocks go (caller-owned host memory; must stay valid until the task finishes).
struct LoadDest {
  enum class Kind {
    /// ptrs[i] -> block i: [L][2][T][h1-h0][D] elements of the namespace dtype.
    kContiguous,
    /// ptrs[(i * L + l) * 2 + kv] -> [T][h1-h0][D] for block i, layer l, kv (0 = K, 1 = V):
    /// one page of a paged KV cache.
    kPaged,
  };
  Kind kind = Kind::kContiguous;
  HeadRange heads;
  std::vector<void*> ptrs;
  /// kPaged only: bytes between consecutive tokens and between consecutive heads of a page,
  /// element (t, h, d) at ptrs[..] + t * token_stride + (h - h0) * head_stride + d * S; 0 = packed
  /// [T][h1-h0][D] ((h1-h0) * D * S and D * S). So a page can sit inside a larger host layout
  /// (SGLang's page_first: token_stride = L * H * D * S). Strides must not make elements overlap.
  uint64_t token_stride = 0;
  uint64_t head_stride = 0;
};

/// Source of one block to dump. All KV heads are required.
struct DumpItem {
  BlockHash hash{};
  BlockHash parent{};   ///< root_hash(ns) for the first block of a chain
  uint32_t token_count = 0;  ///< == block_size of the namespace
  /// Either `kv` ([L][2][T][H][D], payload_bytes() bytes) or `kv_pages` (L*2 pointers to [T][H][D]).
  const void* kv = nullptr;
  const void* const* kv_pages = nullptr;
  /// kv_pages only: bytes between consecutive tokens and between consecutive heads of each page,
  /// element (t, h, d) at kv_pages[p] + t * page_token_stride + h * page_head_stride + d * S;
  /// 0 = packed [T][H][D] (H * D * S and D * S). So a block can be taken from inside a larger host
  /// layout (SGLang's page_first). Strides must not make elements overlap.
  uint64_t page_token_stride = 0;
  uint64_t page_head_stride = 0;
  /// Optional representations payload (store_v1.md §4.3), `repr_len` bytes.
  const void* repr = nullptr;
  size_t repr_len = 0;
  /// Optional: the block's token_count token ids, those the hash was made from (store_v1.md §3.2).
  /// Given, the dump checks hash == MD5(parent || tokens) (InvalidArgument otherwise) and, in a
  /// version-4 store with token_count <= 992, writes them into the record header. Null: the
  /// block is stored "tokens unknown". Read during dump() only.
  const uint32_t* tokens = nullptr;
};

/// An async load or dump. Thread-safe.
class Task {
 public:
  virtual ~Task() = default;
  /// True once every block is finished (ok or failed).
  virtual bool done() const = 0;
  /// Waits up to timeout_ms (< 0: forever). Pending if not done in time; else OK if every block
  /// succeeded, or the first block error (per-block detail in block_status()).
  virtual Status wait(int timeout_ms = -1) = 0;
  /// Per-block result, valid once done(). Load: NotFound (miss), Corruption (checksum: destination
  /// untouched), IOError. Dump: OK also when the block already existed (no-op).
  virtual const std::vector<Status>& block_status() const = 0;
  /// Dump: per block, 1 when this task wrote and committed the block, 0 when it found the block
  /// present (already stored, repeated earlier in the call, or committed meanwhile by another
  /// dump) or the block failed. Valid once done(). Load tasks: all 0.
  virtual const std::vector<uint8_t>& block_written() const = 0;
};

struct DocumentEntry {
  std::string id;
  BlockHash first_block{}, last_block{};
  uint32_t blocks = 0;
  uint64_t tokens = 0;
  std::string source;
  uint64_t created_ms = 0;
  /// What precompute tokenized: "" = text (ucm's own tokenizer), "token_ids" = ids given by the
  /// corpus entry (a server's tokenizer). store_v1.md §5.6, key "input".
  std::string input;
};

class Store {
 public:
  /// Opens (or with create_if_missing, creates) the store at `path`.
  ///
  /// Creation (store_v1.md §1.1) happens only with create_if_missing (mode kReadWrite) and only
  /// when `path` is missing, an empty directory, or the skeleton a killed creation left (no
  /// superblock, only empty store directories / RocksDB files / LOCK). The store is built in a
  /// sibling "<parent>/.<name>.creating-<pid>" and renamed onto `path`, so `path` holds a
  /// complete store or nothing; on a mount point (which a rename cannot replace) it is built in
  /// place, superblock last. If another process creates the store meanwhile, this opens it
  /// instead (usually Busy: that creator holds the writer lock). Leftover siblings of dead
  /// creators are removed. A superblock without index/CURRENT and without data files (creation
  /// killed before the index existed) is finished by the next read-write open; read-only opens
  /// refuse it until then. A non-empty directory without a superblock is never touched.
  ///
  /// Errors: InvalidArgument (missing path, not a store, create_if_missing with kReadOnly),
  /// Version (newer format), Busy (another writer; message names pid/host), Corruption (bad
  /// superblock; or a superblock and data files without an index: run `ucm build
  /// --rebuild-index`), IOError, NoSpace.
  static Status Open(const std::string& path, const OpenOptions& opts, std::unique_ptr<Store>* out);
  virtual ~Store() = default;

  virtual const std::string& path() const = 0;
  virtual bool read_only() const = 0;

  // --- namespaces
  /// Writer: registers `desc` (idempotent: same fingerprint -> same id). InvalidArgument if the
  /// name is taken by a different fingerprint.
  virtual Status register_namespace(const NamespaceDesc& desc, NamespaceId* id) = 0;
  /// By name, or by 32-hex id.
  virtual Status find_namespace(const std::string& name_or_id, NamespaceDesc* desc, NamespaceId* id) = 0;
  /// By id (the hot path: no text). NotFound when `ns` is not registered; a read-only handle
  /// catches up with the writer once before saying so.
  virtual Status get_namespace(const NamespaceId& ns, NamespaceDesc* desc) = 0;
  virtual std::vector<NamespaceDesc> namespaces() = 0;
  /// Writer: stores a named blob with the namespace (e.g. "r4_projection"). Replaces same name.
  /// The record carries the name (store_v1.md §3.3), so `ucm build --rebuild-index` recovers it.
  /// InvalidArgument: empty name or longer than 1024 bytes. NoSpace: see dump().
  virtual Status put_attachment(const NamespaceId& ns, const std::string& name, const void* data, size_t len) = 0;
  /// The blob (without the record's name prefix), checksum-verified. NotFound: no such
  /// attachment; Corruption: checksum or name mismatch.
  virtual Status get_attachment(const NamespaceId& ns, const std::string& name, std::string* data) = 0;

  // --- blocks
  /// present[i] = 1 if hashes[i] is stored in ns; *prefix_blocks = number of leading present blocks.
  virtual Status lookup(const NamespaceId& ns, const BlockHash* hashes, size_t n, uint8_t* present,
                        size_t* prefix_blocks) = 0;
  /// Loads n blocks asynchronously. Invalid dest/head range -> returns a finished task whose
  /// wait() is InvalidArgument and touches nothing.
  virtual std::shared_ptr<Task> load(const NamespaceId& ns, const BlockHash* hashes, size_t n,
                                     const LoadDest& dest) = 0;
  /// Loads representations payloads: dst[i] gets repr_length bytes (cap[i] bytes available).
  /// Per block: NotFound (absent, or stored without representations), Corruption (checksum),
  /// InvalidArgument (cap[i] too small or dst[i] null; nothing copied).
  virtual std::shared_ptr<Task> load_repr(const NamespaceId& ns, const BlockHash* hashes, size_t n,
                                          void* const* dst, const size_t* cap) = 0;
  /// Receives one verified representations payload: block index i, the payload (store_v1.md §4.3,
  /// valid during the call only) and its length. Returns the block's status.
  using ReprVisitor = std::function<Status(size_t i, const uint8_t* payload, size_t len)>;
  /// Like load_repr without the copy: visit(i, payload, len) runs on an I/O thread once block i's
  /// record has passed its checksum, and block i's status is what it returns. It is not called
  /// for a block that fails before (NotFound, Corruption, IOError as load_repr). Calls for
  /// different blocks may run at once: visit must be thread-safe; it must not block on the task.
  /// load_repr is this with a memcpy; ucm_store_load_repr scatters sections with it.
  virtual std::shared_ptr<Task> visit_repr(const NamespaceId& ns, const BlockHash* hashes, size_t n,
                                           ReprVisitor visit) = 0;
  /// Writer: dumps n blocks asynchronously. Durable (fsync'd data + synced index) when done.
  /// An unregistered namespace fails every block with NotFound (as load does).
  /// Blocks already present (or repeated within the call) are no-ops with status OK.
  ///
  /// Free-space reserve (store_v1.md §3.4): before writing anything, the task's bytes B (record
  /// sizes, 4096 + payload rounded up to 4096, per KV and repr record, plus one page for a
  /// possible new data file) are checked against the file system's free space (statvfs, blocks
  /// available to unprivileged users). It needs B + max(2B, min(64 MiB, file system size / 16))
  /// free; otherwise the task fails at once with NoSpace for every block and nothing is written.
  /// After a refusal, later dumps need as much free space as the refused one did (at most
  /// min(64 MiB, size / 16) more than was free then) until space is freed. The reserve keeps the
  /// index able to commit, flush and close. If a write still hits ENOSPC (another process filled
  /// the disk), the whole task fails with NoSpace and none of its blocks is committed.
  ///
  /// The item payloads (kv, kv_pages, repr) must stay valid until the task is done.
  virtual std::shared_ptr<Task> dump(const NamespaceId& ns, const DumpItem* items, size_t n) = 0;
  virtual Status get_block(const NamespaceId& ns, const BlockHash& hash, BlockInfo* info) = 0;
  /// Calls fn(hash, info) for every block of namespace `ns` in the index (key order; a sharded
  /// store: shard by shard, so a block held by two shards comes twice) until fn returns false.
  /// O(blocks); a read-only handle sees the index as of its last catch-up.
  virtual Status for_each_block(const NamespaceId& ns,
                                const std::function<bool(const BlockHash&, const BlockInfo&)>& fn) = 0;
  /// The token ids stored with block `hash` (store_v1.md §3.2) into *tokens (token_count ids;
  /// empty when the block was stored without them: "tokens unknown") and its parent into *parent
  /// (may be null). One 4096-byte read, verified. NotFound: not stored; Corruption, IOError.
  virtual Status block_tokens(const NamespaceId& ns, const BlockHash& hash, std::vector<uint32_t>* tokens,
                              BlockHash* parent) = 0;
  /// The token ids of block `hash`'s whole chain, first block first (blocks x block_size ids), by
  /// walking parents from `hash` to the namespace's chain root (root_hash(desc.hash_seed())).
  /// *blocks (may be null) gets the chain's length. Errors: NotFound (the namespace, or a block on
  /// the way is not stored: the message names it and its distance from `hash`), NotSupported (a
  /// block on the way was stored without ids, "tokens unknown": named), Corruption (a cycle, or
  /// more than `max_blocks` blocks), IOError.
  Status chain_tokens(const NamespaceId& ns, const BlockHash& hash, std::vector<uint32_t>* tokens,
                      size_t* blocks = nullptr, size_t max_blocks = 1u << 20);

  // --- document registry (store_v1.md §5.6)
  virtual Status put_document(const NamespaceId& ns, const DocumentEntry& doc) = 0;
  /// Writer: registers n documents with one fdatasync and one synced index write (all or none
  /// is registered; the DOCUMENT records of a failed call are dead space). Same rules as
  /// put_document for each; a later entry with the same id replaces an earlier one.
  virtual Status put_documents(const NamespaceId& ns, const DocumentEntry* docs, size_t n) = 0;
  virtual Status get_document(const NamespaceId& ns, const std::string& id, DocumentEntry* doc) = 0;
  virtual std::vector<DocumentEntry> documents(const NamespaceId& ns) = 0;

  // --- misc
  /// Read-only: catch up with the writer now. Writer: no-op.
  virtual Status refresh() = 0;
  /// Prometheus text exposition of the counters and histograms of this handle.
  virtual std::string metrics_text() const = 0;
};

}  // namespace ucm
