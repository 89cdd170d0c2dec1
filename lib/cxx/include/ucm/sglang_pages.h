// ucm/sglang_pages.h: SGLang page aliases of a prefix-chain namespace (store_v1.md §12.1): the
// table from SGLang HiCache page keys to the namespace's blocks, built from the stored token ids
// of its registered documents, and the reader side that resolves page keys through it. One owner
// for every caller: `ucm sglang-pages`, `ucm precompute --sglang-page-size`, the C ABI
// (ucm_sglang_pages_*) and through it the ucm.sglang backend.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ucm/sglang_keys.h"
#include "ucm/store.h"

namespace ucm {

/// Hash of a page key for unordered containers: its first bytes (a SHA-256 digest's are uniform).
struct SglangPageHashHasher {
  size_t operator()(const SglangPageHash& k) const noexcept {
    size_t v;
    std::memcpy(&v, k.data(), sizeof v);
    return v;
  }
};

/// What build_sglang_pages did.
struct SglangPagesBuildReport {
  uint32_t page_size = 0, block_size = 0;
  uint64_t documents = 0;           ///< registered documents of the namespace
  uint64_t documents_used = 0;      ///< whose chains gave at least one full page
  uint64_t documents_skipped = 0;   ///< chains without ids (tokens unknown) or with a block gone
  uint64_t chains = 0;              ///< other chains with ids (ending at no document: a server's saves)
  uint64_t chains_used = 0;         ///< of those, whose ids gave at least one full page
  uint64_t chains_skipped = 0;      ///< of those, with a block on the way without ids or gone
  uint64_t pages = 0;               ///< distinct page keys in the table
  uint64_t table_bytes = 0;         ///< the attachment's payload
  std::string first_skip;           ///< why the first skipped document was skipped
};

/// Builds the alias table of namespace `ns` for SGLang page size `page_size` (a multiple of the
/// namespace's block size) and stores it as the attachment "sglang_pages.p<page_size>",
/// replacing an older one. Chains start unseeded (SGLang requests without extra_key and
/// cache_salt). Needs a writer handle. Progress (one line per ~1,000 documents) to `progress`.
/// Errors: InvalidArgument (page size; a read-only handle), NotFound (namespace), IOError,
/// NoSpace. Documents whose chain cannot give ids are skipped and counted, not errors.
Status build_sglang_pages(Store* store, const NamespaceId& ns, uint32_t page_size, SglangPagesBuildReport* report,
                          const std::function<void(const std::string&)>& progress = nullptr);

/// The reader side: a table held in memory, keyed by page key. Thread-safe (a mutex guards the
/// reload); the Store must outlive it.
class SglangPageIndex {
 public:
  /// Reads the table "sglang_pages.p<page_size>" of `ns`. NotFound: none (build it with `ucm
  /// sglang-pages`); Corruption / NotSupported from the table (store_v1.md §12.1).
  static Status Open(Store* store, const NamespaceId& ns, uint32_t page_size, std::unique_ptr<SglangPageIndex>* out);

  uint32_t page_size() const { return page_size_; }
  uint32_t blocks_per_page() const { return k_; }
  size_t pages() const;

  /// For each of keys[n]: found[i] = 1 when the page is listed, and then its k block hashes go to
  /// blocks[i*k .. i*k + k) (untouched otherwise). blocks may be null.
  void resolve(const SglangPageHash* keys, size_t n, BlockHash* blocks, uint8_t* found) const;

  /// Reads the table again when at least `min_interval` passed since the last read and it changed
  /// (a rebuild by `ucm sglang-pages`). Errors leave the current table in place.
  Status maybe_reload(std::chrono::milliseconds min_interval);

 private:
  Status load_locked();
  Store* store_ = nullptr;
  NamespaceId ns_{};
  uint32_t page_size_ = 0, k_ = 0;
  mutable std::mutex mu_;
  std::unordered_map<SglangPageHash, uint32_t, SglangPageHashHasher> index_;  // key -> page number
  std::vector<BlockHash> blocks_;                                // page number * k
  uint64_t checksum_ = 0;
  std::chrono::steady_clock::time_point loaded_{};
};

}  // namespace ucm
