// ucm/core/store_impl.h: StoreImpl, the one implementation of ucm::Store for a single store: a
// facade over the shared state (StoreShared, store_shared.h), the read paths (StoreReader,
// store_reader.h) and, on a read-write handle, the write paths (StoreWriter, store_writer.h).
// Internal to libucm. Definitions:
//   store_open.cc   creation, open (init), close, the background thread, the table's saves,
//                   Store::Open
//   store_meta.cc   namespaces, attachments, documents (the meta records and their index entries)
//   store_reader.cc / store_writer.cc / store_dump.cc   the reader and the writer
//
// Lifetime: created and init()ed by Store::Open (open_single_store); the destructor stops the
// background thread, finishes the I/O threads' jobs and the writer's commits, saves the table
// and closes the index. Thread rules: as ucm::Store (every method from any thread at once).
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ucm/core/index_open.h"
#include "ucm/core/store_reader.h"
#include "ucm/core/store_shared.h"
#include "ucm/core/store_writer.h"
#include "ucm/store.h"

namespace ucm::detail {

class StoreImpl : public Store {
 public:
  StoreImpl(std::string path, const OpenOptions& o) : s_(std::move(path), o), reader_(&s_) {}
  ~StoreImpl() override;

  Status init(bool create);
  /// Creates a new store at the path (missing, empty or kSkeleton): built in the sibling
  /// fmt::creating_dir() and renamed into place, so the path holds a complete store or nothing
  /// (store_v1.md §1.1). Leaves lock_ held. *raced: another process put something at the path
  /// meanwhile; nothing was created, classify again.
  Status create_new(fmt::StoreDirState state, bool* raced);
  /// Creation inside `target` itself (a mount point, which a rename cannot replace): superblock
  /// last, so a kill leaves a skeleton the next create clears.
  Status create_in_place(const std::string& target, fmt::StoreDirState state);

  const std::string& path() const override { return s_.path; }
  bool read_only() const override { return s_.read_only(); }

  Status register_namespace(const NamespaceDesc& desc, NamespaceId* id) override;
  /// store_v1.md §12.2: steps a version-4 store to 5 (index, then superblock).
  Status step_to_page_namespaces();
  Status find_namespace(const std::string& name_or_id, NamespaceDesc* desc, NamespaceId* id) override;
  Status get_namespace(const NamespaceId& ns, NamespaceDesc* desc) override { return reader_.get_namespace(ns, desc); }
  std::vector<NamespaceDesc> namespaces() override;
  Status put_attachment(const NamespaceId& ns, const std::string& name, const void* data, size_t len) override;
  Status get_attachment(const NamespaceId& ns, const std::string& name, std::string* data) override;

  Status lookup(const NamespaceId& ns, const BlockHash* hashes, size_t n, uint8_t* present,
                size_t* prefix_blocks) override {
    return reader_.lookup(ns, hashes, n, present, prefix_blocks);
  }
  std::shared_ptr<Task> load(const NamespaceId& ns, const BlockHash* hashes, size_t n, const LoadDest& dest) override {
    return reader_.load(ns, hashes, n, dest);
  }
  std::shared_ptr<Task> load_repr(const NamespaceId& ns, const BlockHash* hashes, size_t n, void* const* dst,
                                  const size_t* cap) override {
    return reader_.load_repr(ns, hashes, n, dst, cap);
  }
  std::shared_ptr<Task> visit_repr(const NamespaceId& ns, const BlockHash* hashes, size_t n,
                                   ReprVisitor visit) override {
    return reader_.visit_repr(ns, hashes, n, std::move(visit));
  }
  std::shared_ptr<Task> dump(const NamespaceId& ns, const DumpItem* items, size_t n) override {
    if (!writer_) {
      Status s = writer_only("dump");
      s_.metrics.count_error(s.code());
      return TaskImpl::Failed(n, s);
    }
    return writer_->dump(ns, items, n);
  }
  Status get_block(const NamespaceId& ns, const BlockHash& hash, BlockInfo* info) override {
    return reader_.get_block(ns, hash, info);
  }
  Status for_each_block(const NamespaceId& ns,
                        const std::function<bool(const BlockHash&, const BlockInfo&)>& fn) override {
    return reader_.for_each_block(ns, fn);
  }
  Status block_tokens(const NamespaceId& ns, const BlockHash& hash, std::vector<uint32_t>* tokens,
                      BlockHash* parent) override {
    return reader_.block_tokens(ns, hash, tokens, parent);
  }

  Status put_document(const NamespaceId& ns, const DocumentEntry& doc) override;
  Status put_documents(const NamespaceId& ns, const DocumentEntry* docs, size_t n) override;
  Status get_document(const NamespaceId& ns, const std::string& id, DocumentEntry* doc) override;
  std::vector<DocumentEntry> documents(const NamespaceId& ns) override;

  Status refresh() override { return reader_.refresh(); }
  std::string metrics_text() const override { return reader_.metrics_text(); }

  /// The read paths (read_verified and the rest). Valid while the handle is.
  StoreReader& reader() { return reader_; }
  /// The write paths (dump's phases and the rest); null on a read-only handle.
  StoreWriter* writer() { return writer_.get(); }

 private:
  /// OK on a read-write handle; else InvalidArgument naming `what`.
  Status writer_only(const char* what) const {
    if (!read_only()) return Status::OK();
    // Appended piece by piece: GCC 12 reports a false -Warray-bounds on the chained operator+
    // once this is inlined.
    std::string msg(what);
    msg.append(" needs a read-write handle; ").append(s_.path).append(" was opened read-only");
    return Status::InvalidArgument(msg);
  }
  /// A namespace, an attachment: check_space, then one record and its index entries (fill).
  Status write_meta_record(fmt::RecordHeader* h, const std::string& payload, StoreWriter::RecordAt* at,
                           const std::function<Status(Index::Batch&)>& fill);
  Status write_documents(const char* op, const NamespaceId& ns, const DocumentEntry* docs, size_t n);
  /// Writes STORE/fptable from a copy of the table (fptable.md §3) when `force` or when it is
  /// behind by kFpTableSaveEntries journal entries, or by any for kFpTableSaveMs.
  void save_table(bool force);
  void background();

  StoreShared s_;
  StoreReader reader_;
  std::unique_ptr<StoreWriter> writer_;  // read-write handles only, created by init()
  std::unique_ptr<fmt::WriterLock> lock_;
  std::unique_ptr<Index> own_index_;      // the primary (read-write)
  std::unique_ptr<ReaderIndex> ro_index_;  // the secondary (read-only)

  // The table's saves (fptable.md §3).
  std::string index_identity_;             // the index's identity (fptable.md §2)
  std::mutex save_mu_;                     // one save_table at a time
  uint64_t saved_seq_ = 0;                 // journal sequence of the last STORE/fptable written or loaded
  Clock::time_point saved_at_{};
  std::atomic<bool> save_pending_{false};  // the open asks for a save (background thread, or close)

  std::thread bg_;
  std::mutex bg_mu_;
  std::condition_variable bg_cv_;
  bool stop_ = false;
};

}  // namespace ucm::detail
