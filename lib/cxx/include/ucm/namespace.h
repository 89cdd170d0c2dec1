// ucm/namespace.h: the fingerprint of what produced a block (store_v1.md §7).
#pragma once
#include <cstdint>
#include <string>

#include "ucm/status.h"
#include "ucm/types.h"

namespace ucm {

enum class DType : uint32_t { kBF16 = 1, kFP16 = 2, kFP32 = 3 };
/// "bf16" | "fp16" | "fp32".
const char* dtype_name(DType d);
Status parse_dtype(std::string_view s, DType* out);
/// Bytes per element: 2, 2, 4.
size_t dtype_size(DType d);

struct NamespaceDesc {
  std::string model_id;        ///< e.g. "SmolLM2-135M-Instruct"
  std::string weights_digest;  ///< hex digest of weights + config, defined by the producer
  DType dtype = DType::kBF16;  ///< payload element type
  uint32_t block_size = 16;    ///< tokens per block
  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t layout = 1;         ///< payload layout id (store_v1.md §4.2); only 1 exists
  std::string hash_scheme = "md5-chain-v1";
  std::string extra_json = "{}";  ///< producer-defined JSON object, part of the fingerprint
  std::string name;               ///< human name, unique per store, not part of the fingerprint

  /// Canonical JSON of every field but `name` (sorted keys, no whitespace).
  std::string canonical_json() const;
  /// MD5(canonical_json()).
  NamespaceId id() const;
  /// The namespace id that seeds this namespace's block hash chains (store_v1.md §7.1):
  /// extra.hash_seed_namespace (32 hex digits; set by `ucm migrate --dtype` so converted blocks
  /// keep their source's hashes) when present, else id(). Chains start at root_hash(hash_seed());
  /// everything that hashes tokens for this namespace must use it, not id().
  NamespaceId hash_seed() const;
  /// Name if set, else "<model_id>/<dtype>/b<block_size>/<first 8 hex of id>".
  std::string display_name() const;
  /// KV payload bytes of one block: L * 2 * T * H * D * dtype_size.
  uint64_t payload_bytes() const;
  /// The hash scheme of SGLang page namespaces (store_v1.md §12.2): block hash = the first 16
  /// bytes of SGLang's page key; blocks of one page; extra.sglang_pages describes them.
  static constexpr const char* kSglangPageScheme = "sglang-sha256-page-v1";
  /// hash_scheme == kSglangPageScheme: a namespace of pages SGLang wrote (format 5).
  bool is_sglang_pages() const { return hash_scheme == kSglangPageScheme; }
  /// Checks ranges (nonzero dims, layout 1, known hash scheme, extra is a JSON object whose
  /// "hash_seed_namespace", if present, is a string of 32 hex digits).
  Status validate() const;
  /// Full JSON including name.
  std::string to_json() const;
  static Status from_json(std::string_view json, NamespaceDesc* out);
};

}  // namespace ucm
