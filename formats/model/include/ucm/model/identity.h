// ucm/model/identity.h: the one owner of a model's namespace identity (store_v1.md §7): the
// weights digest, the model id, the precompute options that enter the fingerprint, and the
// namespace descriptor JSON they make. `ucm precompute`, `ucm inspect --audit`, the reference
// engine (through the model runner) and the Python servers (through ucm_model_fingerprint in
// ucm/ucm.h) all compute it here. No libtorch.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ucm/model/config.h"
#include "ucm/status.h"

namespace ucm::safetensors {
class Collection;
}

namespace ucm::model {

/// The precompute options that are part of the fingerprint (defaults: precompute's).
struct FingerprintOptions {
  std::string dtype = "bf16";      ///< payload dtype: "bf16" | "fp16" | "fp32"
  uint32_t block_size = 16;        ///< tokens per block
  uint32_t hash_bits = 128;        ///< R4 bits per token
  std::vector<uint32_t> dense_layers = {0, 1};  ///< sorted, unique
  uint64_t projection_seed = 20240611;          ///< seed of the r4_projection
  std::string namespace_name;      ///< "" = the default name; not part of the id
};

/// The weights digest: MD5 hex over, for every tensor of the collection in byte-wise name order,
/// `name NUL dtype-name NUL raw-bytes` (dtype names as safetensors writes them: F32, BF16, ...).
/// Reads every byte once (about 0.4 s for 270 MB).
std::string weights_digest(const safetensors::Collection& weights);

/// The model id of a model directory: config.json's `_name_or_path` (its last component) when
/// present, else the directory's name.
std::string model_id_of(const std::string& dir);

/// The namespace descriptor JSON (fields of store_v1.md §7: model_id, weights_digest, dtype,
/// block_size, num_layers, num_kv_heads, head_dim, layout 1, hash_scheme md5-chain-v1, extra
/// {hash_bits, dense_layers, repr, projection_seed}, and name when o.namespace_name is set).
std::string namespace_desc_json(const std::string& model_id, const std::string& digest, const ModelConfig& c,
                                const FingerprintOptions& o);

/// All of it from a model directory: config.json's geometry (ModelConfig::geometry_from_json_file:
/// any decoder family, the model runner's or not), the
/// safetensors weights' digest, the model id. InvalidArgument naming the file for a bad or missing
/// config.json, a missing or malformed safetensors file, or options out of range (dtype other than
/// bf16/fp16/fp32, block_size 0, hash_bits not a positive multiple of 8).
Status model_fingerprint(const std::string& dir, const FingerprintOptions& o, std::string* desc_json);

/// FingerprintOptions from JSON ({"dtype", "block_size", "hash_bits", "dense_layers",
/// "projection_seed", "namespace_name"}; missing keys keep the defaults; "" or "{}" = defaults).
/// InvalidArgument naming the key for a bad value or an unknown key.
Status fingerprint_options_from_json(const std::string& json, FingerprintOptions* o);

}  // namespace ucm::model
