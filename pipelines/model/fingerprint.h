// pipelines/model/fingerprint.h: the namespace fingerprint of a model and the precompute options
// that enter it (store_v1.md §7), as the descriptor JSON that libucm's C ABI takes
// (ucm_namespace_id, ucm_store_namespace_register). Both sides use it: precompute registers the
// namespace it writes, the engine (pipelines/generate) looks the same one up. No store code here.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ucm/status.h"

namespace ucm::model {

class LlamaModel;

/// The precompute options that are part of the fingerprint (defaults: precompute's).
struct FingerprintOptions {
  std::string dtype = "bf16";      ///< payload dtype: "bf16" | "fp16" | "fp32"
  uint32_t block_size = 16;        ///< tokens per block
  uint32_t hash_bits = 128;        ///< R4 bits per token
  std::vector<uint32_t> dense_layers = {0, 1};  ///< sorted, unique
  uint64_t projection_seed = 20240611;          ///< seed of the r4_projection
  std::string namespace_name;      ///< "" = the default name; not part of the id
};

/// Reads the fingerprint keys of a precompute YAML config (configs/precompute.yaml):
/// namespace_name, block_size, dtype, hash_bits, dense_layers (a list or "0,1"), projection_seed.
/// Other keys are left to their readers (precompute's load_config checks them). InvalidArgument:
/// unreadable file, not a mapping, a bad value (the message names the file and the key).
Status read_fingerprint_config(const std::string& path, FingerprintOptions* o);

/// Parses "0,1,5" into sorted unique layer numbers (empty string = no layers). InvalidArgument
/// naming the list for anything else.
Status parse_layers(const std::string& s, std::vector<uint32_t>* out);

/// The model id of a model directory: config.json's `_name_or_path` (its last component) when
/// present, else the directory's name.
std::string model_id_of(const std::string& dir);

/// The namespace descriptor JSON (fields of store_v1.md §7: model_id, weights_digest, dtype,
/// block_size, num_layers, num_kv_heads, head_dim, layout 1, hash_scheme md5-chain-v1, extra
/// {hash_bits, dense_layers, repr, projection_seed}, and name when o.namespace_name is set).
std::string namespace_desc_json(const LlamaModel& m, const FingerprintOptions& o);

}  // namespace ucm::model
