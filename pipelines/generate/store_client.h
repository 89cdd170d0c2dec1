// pipelines/generate/store_client.h: the reference engine's view of a store, through libucm's C
// ABI only (ucm/ucm.h, ucm/retrieval.h), as an external inference server sees it. Nothing here
// includes a libucm C++ header: if the engine needs something, the C ABI must offer it.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ucm/blend.h"
#include "ucm/retrieval.h"
#include "ucm/status.h"
#include "ucm/ucm.h"

namespace ucm::generate {

using Hash16 = std::array<uint8_t, 16>;

/// Converts a UCM_* return code and ucm_last_error() into a Status ("<what>: <message>").
Status from_code(int code, const std::string& what);

/// One open store handle and the namespace the engine reads and writes. Every C call the engine
/// makes on the store goes through a method here (there is no raw handle).
class StoreClient {
 public:
  StoreClient() = default;
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;
  ~StoreClient();

  /// Opens `path` read-only, or read-write (creating the store when missing) when `writer`.
  Status open(const std::string& path, bool writer);
  /// Resolves the namespace: `name_or_id` when not empty (NotFound when absent), else the one
  /// that suits `desc_json` (the fingerprint precompute registers for this model and options) by
  /// the rule of store_v1.md §7.3 (ucm_store_namespace_match, block size equal). found() tells
  /// whether the store holds one; a writer creates `desc_json`'s (ucm_store_namespace_create:
  /// with its r4_projection) when it does not and `register_missing`.
  Status resolve_namespace(const std::string& name_or_id, const std::string& desc_json, bool register_missing);
  bool found() const { return found_; }
  const Hash16& ns() const { return ns_; }
  const Hash16& hash_seed() const { return seed_; }
  /// The namespace id as 32 hex digits.
  std::string ns_hex() const;

  /// Chained hashes of the full blocks of `tokens` (ucm_hash_blocks from the hash seed).
  Status hash_blocks(const std::vector<int32_t>& tokens, uint32_t block_size, std::vector<Hash16>* out) const;
  /// Leading present blocks of `hashes` (0 when the namespace is not in the store).
  Status prefix_blocks(const std::vector<Hash16>& hashes, size_t* n) const;
  /// Presence of each block of `hashes` (present[i] 0/1) and the leading present count.
  Status lookup(const std::vector<Hash16>& hashes, std::vector<uint8_t>* present, size_t* prefix) const;
  /// Loads blocks [0, n) of `hashes` into a paged KV cache: ptrs[(i * L + l) * 2 + kv] -> one
  /// [T][H][D] page (UCM_DEST_PAGED). status[i] gets each block's UCM_* code.
  Status load_paged(const std::vector<Hash16>& hashes, size_t n, const std::vector<void*>& ptrs,
                    std::vector<int>* status) const;
  /// Writer: dumps blocks (hashes[i], parents[i], kv[i] -> [L][2][T][H][D]) with their token ids
  /// (tokens: [n][T], store_v1.md §3.2; empty = none) through ucm_store_dump_ex; waits for them.
  Status dump(const std::vector<Hash16>& hashes, const std::vector<Hash16>& parents,
              const std::vector<const void*>& kv, const std::vector<uint32_t>& tokens = {}) const;

  /// The namespace's representation layout (ucm_store_repr_info).
  Status repr_info(ucm_repr_info* info) const;
  /// The namespace's r4_projection attachment, fp32 [L][H][D][hash_bits] (empty when hash_bits 0).
  Status r4_projection(const ucm_repr_info& info, std::vector<float>* proj) const;
  /// Loads the representations of blocks [0, n) of `hashes` into `dst` (ucm_store_load_repr);
  /// status[i] gets each block's UCM_* code.
  Status load_repr(const std::vector<Hash16>& hashes, size_t n, const ucm_repr_buffers* dst,
                   std::vector<int>* status) const;
  /// The namespace's RoPE (ucm_store_rope_params).
  Status rope_params(ucm_rope_params* rope) const;
  /// The namespace's chunk prefix (ucm_store_chunk_prefix); NotFound when it holds no chunks.
  Status chunk_prefix(std::vector<int32_t>* ids) const;
  /// The source of registry entry `id` (ucm_store_document_get); NotFound when not registered.
  Status document_source(const std::string& id, std::string* source) const;

 private:
  ucm_store_t* store_ = nullptr;
  bool writer_ = false, found_ = false;
  Hash16 ns_{}, seed_{};
};

}  // namespace ucm::generate
