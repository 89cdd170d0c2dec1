// ucm/core/sharded_store.h: ShardedStore, the ucm::Store of a sharded root (store_v1.md §11):
// the writer's own shard for writes, the union of every registered shard for reads.
// Internal to libucm; Store::Open returns one for a root of format version 3.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ucm/store.h"

namespace ucm::detail {

/// Opens `path` as a single (version 1-2) store, never as a sharded root: Store::Open's path for
/// everything but roots, and ShardedStore's for its shards.
Status open_single_store(const std::string& path, const OpenOptions& opts, std::unique_ptr<Store>* out);

/// One open shard: a StoreImpl of STORE/shards/<name>, read-write for the writer's own shard,
/// read-only for every other.
struct Shard {
  std::string name;
  std::unique_ptr<Store> store;
  bool own = false;
  /// Steady-clock ms until which lookups skip this shard: set when one of its loads failed with
  /// an I/O error (its file system went away), cleared by the next refresh that reaches it.
  std::atomic<int64_t> away_until_ms{0};
};
using ShardList = std::vector<std::shared_ptr<Shard>>;

/// Per-shard launch of a part of a task: `idx` are the caller's block indexes the shard serves,
/// in order; the returned task's block i is the caller's block idx[i].
using ShardLaunch = std::function<std::shared_ptr<Task>(Shard& shard, const std::vector<size_t>& idx)>;

/// A load / load_repr / visit_repr over several shards (sharded_task.cc). Each block is read
/// from the first shard (in list order) whose lookup holds it; a block that fails there
/// (NotFound, Corruption, IOError) is tried on the next shard that holds it. What fails
/// everywhere keeps its last status, except IOError, which becomes NotFound (a miss: the
/// server recomputes) with the I/O error's text. No threads of its own: done() and wait() move
/// it on.
std::shared_ptr<Task> run_over_shards(const ShardList& shards, const std::vector<std::vector<uint8_t>>& present,
                                      size_t n, ShardLaunch launch);

class ShardedStore : public Store {
 public:
  ShardedStore(std::string root, const OpenOptions& o) : root_(std::move(root)), opts_(o) {}
  ~ShardedStore() override;
  /// The root exists (format 3). Opens the own shard (writer: created on first use) and every
  /// registered shard it can, and starts the refresh thread.
  Status init();

  const std::string& path() const override { return root_; }
  bool read_only() const override { return opts_.mode == OpenOptions::Mode::kReadOnly; }

  Status register_namespace(const NamespaceDesc& desc, NamespaceId* id) override;
  Status find_namespace(const std::string& name_or_id, NamespaceDesc* desc, NamespaceId* id) override;
  Status get_namespace(const NamespaceId& ns, NamespaceDesc* desc) override;
  std::vector<NamespaceDesc> namespaces() override;
  Status put_attachment(const NamespaceId& ns, const std::string& name, const void* data, size_t len) override;
  Status get_attachment(const NamespaceId& ns, const std::string& name, std::string* data) override;

  Status lookup(const NamespaceId& ns, const BlockHash* hashes, size_t n, uint8_t* present,
                size_t* prefix_blocks) override;
  std::shared_ptr<Task> load(const NamespaceId& ns, const BlockHash* hashes, size_t n, const LoadDest& dest) override;
  std::shared_ptr<Task> load_repr(const NamespaceId& ns, const BlockHash* hashes, size_t n, void* const* dst,
                                  const size_t* cap) override;
  std::shared_ptr<Task> visit_repr(const NamespaceId& ns, const BlockHash* hashes, size_t n, ReprVisitor visit) override;
  std::shared_ptr<Task> dump(const NamespaceId& ns, const DumpItem* items, size_t n) override;
  Status get_block(const NamespaceId& ns, const BlockHash& hash, BlockInfo* info) override;
  Status block_tokens(const NamespaceId& ns, const BlockHash& hash, std::vector<uint32_t>* tokens,
                      BlockHash* parent) override;
  Status for_each_block(const NamespaceId& ns,
                        const std::function<bool(const BlockHash&, const BlockInfo&)>& fn) override;

  Status put_document(const NamespaceId& ns, const DocumentEntry& doc) override;
  Status put_documents(const NamespaceId& ns, const DocumentEntry* docs, size_t n) override;
  Status get_document(const NamespaceId& ns, const std::string& id, DocumentEntry* doc) override;
  std::vector<DocumentEntry> documents(const NamespaceId& ns) override;

  Status refresh() override;
  std::string metrics_text() const override;

  /// The writer's shard name (empty for a reader).
  const std::string& own_name() const { return own_name_; }

 private:
  std::shared_ptr<const ShardList> snapshot() const;
  /// Lists shards/ and opens the registered shards not open yet. IOError when shards/ cannot be
  /// listed; a shard that fails to open is logged (once per error text) and tried next time.
  Status rescan();
  /// present[s][i]: shard s (snapshot order) holds block i; shards away are all-absent.
  void presence(const ShardList& l, const NamespaceId& ns, const BlockHash* hashes, size_t n,
                std::vector<std::vector<uint8_t>>* present);
  Status writer_only(const char* what) const;
  /// Writers: a write into namespace ns that only other shards register first registers its
  /// descriptor in the own shard (store_v1.md §11.1: the id is the descriptor's fingerprint, so
  /// it is the same namespace); OK when the own shard has it; NotFound when no shard does.
  Status adopt_namespace(const NamespaceId& ns);
  void background();

  std::string root_;
  OpenOptions opts_;
  std::string own_name_;
  mutable std::mutex mu_;
  std::shared_ptr<const ShardList> list_;  // own first, then by name
  std::map<std::string, std::string> open_errors_;  // name -> last error text logged
  std::mutex rescan_mu_;
  std::thread bg_;
  std::mutex bg_mu_;
  std::condition_variable bg_cv_;
  bool stop_ = false;
};

}  // namespace ucm::detail
