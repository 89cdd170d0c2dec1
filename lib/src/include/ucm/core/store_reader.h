// ucm/core/store_reader.h: StoreReader, the read paths of a single store: the lookup table and
// its catch-up (refresh), lookup, get_block, the one verified payload read (read_verified) and
// the tasks built on it (load, load_repr, visit_repr). Internal to libucm; the Store facade
// (StoreImpl, store_impl.h) forwards to it. Definitions: lib/src/store_reader.cc.
//
// Lifetime: owned by the facade, built on its StoreShared (which must outlive it) and usable
// once the facade's init() has filled that. Tasks it starts run on the shared pool; the facade
// shuts the pool down (finishing them) before destroying the reader.
// Thread rules: every method may be called from any thread at once. refresh() is serialised
// by its own mutex; the table is read under the shared table_mu. The reader sees no writer
// state: on a read-write handle the writer keeps the table exact and refresh() does nothing.
#pragma once
#include <memory>
#include <mutex>
#include <string>

#include "ucm/core/store_shared.h"
#include "ucm/core/task_impl.h"

namespace ucm::detail {

class StoreReader {
 public:
  explicit StoreReader(StoreShared* shared) : s_(*shared) {}
  StoreReader(const StoreReader&) = delete;
  StoreReader& operator=(const StoreReader&) = delete;

  /// Read-only handles: catches the secondary index up with the writer and replays the journal
  /// into the table (a rebuild when gc trimmed entries it never saw). Read-write: nothing.
  Status refresh();
  /// The namespace's descriptor; a reader that does not know it catches up once first.
  Status get_namespace(const NamespaceId& ns, NamespaceDesc* desc);

  /// Which present[i] / the prefix of blocks whose block hash is in the table (no I/O).
  Status lookup(const NamespaceId& ns, const BlockHash* hashes, size_t n, uint8_t* present, size_t* prefix_blocks);
  /// The index entry of one block.
  Status get_block(const NamespaceId& ns, const BlockHash& hash, BlockInfo* info);

  /// Store::for_each_block: the index's blocks of `ns`.
  Status for_each_block(const NamespaceId& ns, const std::function<bool(const BlockHash&, const BlockInfo&)>& fn);
  /// Store::block_tokens: the index entry, then the KV record's header page (a NotFound from the
  /// data file: catch up once and retry, as read_verified).
  Status block_tokens(const NamespaceId& ns, const BlockHash& hash, std::vector<uint32_t>* tokens, BlockHash* parent);

  /// Which payload of a block record read_verified reads.
  enum class Payload { kKV, kRepr };
  /// The one verified read of a block payload (load, load_repr, visit_repr): looks the block
  /// (ns, hash) up in the index into *rec, then reads its kKV or kRepr record into *buf (the
  /// 4096-byte record header page, then the payload), checking record type, namespace, key,
  /// length and checksum. kKV with kv_bytes != 0: Corruption when the index's kv_length
  /// differs. kRepr: NotFound when the block has no representations. A NotFound from the data
  /// file means gc retired it and our view is stale: the file is dropped, the handle catches up
  /// (refresh) and the read is retried once. Errors: NotFound (not in the index / no repr /
  /// still missing), Corruption, IOError. Any thread; *buf is the caller's.
  Status read_verified(const NamespaceId& ns, const BlockHash& hash, Payload which, uint64_t kv_bytes,
                       fmt::BlockRecord* rec, fmt::AlignedBuffer* buf);

  /// Store::load: checks the destination on the caller's thread, then one read_verified per
  /// block on the I/O threads, copying the KV-head range into the destination.
  std::shared_ptr<Task> load(const NamespaceId& ns, const BlockHash* hashes, size_t n, const LoadDest& dest);
  /// Store::load_repr: visit_repr copying each payload into dst[i] (at most cap[i] bytes).
  std::shared_ptr<Task> load_repr(const NamespaceId& ns, const BlockHash* hashes, size_t n, void* const* dst,
                                  const size_t* cap);
  /// Store::visit_repr: one read_verified (kRepr) per block on the I/O threads, then visit.
  std::shared_ptr<Task> visit_repr(const NamespaceId& ns, const BlockHash* hashes, size_t n, Store::ReprVisitor visit);

  /// The Prometheus text of the handle's metrics (with the table's size).
  std::string metrics_text() const;

 private:
  /// Caller holds refresh_mu_.
  Status replay_journal();
  /// Caller holds refresh_mu_.
  Status rebuild_table();
  void load_one(const std::shared_ptr<TaskImpl>& t, size_t i, const NamespaceId& ns, const BlockHash& hash,
                const NamespaceDesc& d, uint32_t h0, uint32_t h1, const LoadDest& dest);
  void finish_load(const std::shared_ptr<TaskImpl>& t);

  StoreShared& s_;
  std::mutex refresh_mu_;
};

}  // namespace ucm::detail
