// ucm/namespace_match.h: which namespace of a store a model may use, and creating one
// (store_v1.md §7.3). The one rule: `ucm precompute`, the reference engine, and the Python
// servers (through ucm_store_namespace_match / ucm_store_namespace_create in ucm/ucm.h) all
// call these.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ucm/namespace.h"
#include "ucm/status.h"

namespace ucm {

class Store;

/// The fields in which `stored` differs from `want` for the rule of store_v1.md §7.3, as
/// "field <stored> (store) vs <want> (this model)" joined by "; " ("" = it suits).
/// engine_block: the caller's block (vLLM) or page (SGLang) size in tokens, which the stored
/// block_size must divide; 0 = the stored block_size must equal want.block_size.
std::string namespace_mismatch(const NamespaceDesc& stored, const NamespaceDesc& want, uint32_t engine_block);

/// The result of match_namespace.
struct NamespaceMatch {
  bool found = false;          ///< a namespace suits
  bool exact = false;          ///< it is want's own id
  NamespaceDesc desc;          ///< the one picked (found)
  NamespaceId id{};            ///< its id (found)
  /// Stored namespaces of want's model_id with another id, suiting or not, as
  /// "'name': differences" (every field, extra too; for precompute's refusal to add a second
  /// fingerprint of one model).
  std::vector<std::string> same_model;
  std::string message;         ///< !found: why, naming want's fingerprint and each namespace's differences
};

/// Picks the namespace of `listed` that suits `want` (store_v1.md §7.3): want's own id, else
/// the largest block_size, ties by name then id. `store` names the store in the message.
NamespaceMatch match_namespace(const std::vector<NamespaceDesc>& listed, const NamespaceDesc& want,
                               uint32_t engine_block, const std::string& store);

/// The r4_projection attachment (store_v1.md §4.3, §7.3) for `seed`: fp32 [L][H][D][B]
/// row-major, each (l, h) slice the first columns of Haar-random orthogonal D x D matrices.
std::vector<float> r4_projection(uint32_t num_layers, uint32_t num_kv_heads, uint32_t head_dim, uint32_t hash_bits,
                                 uint64_t seed);

/// Registers `want` in `store` (or finds it, same id) and, when extra.hash_bits > 0, puts its
/// r4_projection, or checks a stored one (Corruption when an entry differs by more than 1e-6).
/// *proj (may be NULL) gets the projection the namespace holds. Errors: those of
/// register_namespace / put_attachment (ReadOnly, Busy, IOError), InvalidArgument for an
/// extra whose hash_bits / projection_seed are not unsigned integers.
Status create_namespace(Store* store, const NamespaceDesc& want, NamespaceId* id, std::vector<float>* proj = nullptr);

}  // namespace ucm
