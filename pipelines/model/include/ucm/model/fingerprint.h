// pipelines/model/include/ucm/model/fingerprint.h: the namespace fingerprint of a model and the precompute options
// that enter it (store_v1.md §7), as the descriptor JSON that libucm's C ABI takes
// (ucm_namespace_id, ucm_store_namespace_register). Both sides use it: precompute registers the
// namespace it writes, the engine (pipelines/generate) looks the same one up. No store code here.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ucm/model/identity.h"
#include "ucm/status.h"

namespace YAML {
class Node;
}

namespace ucm::model {

class LlamaModel;

/// Loads a YAML config file (configs/*.yaml) into *root: a mapping, or Null for an empty file.
/// InvalidArgument naming the file when it is unreadable, malformed or not a mapping.
Status load_config_mapping(const std::string& path, YAML::Node* root);

/// The fingerprint keys of a loaded config mapping (read_fingerprint_config's), other keys left
/// to the caller: precompute reads its file once and hands the mapping here.
Status read_fingerprint_keys(const YAML::Node& root, const std::string& path, FingerprintOptions* o);

/// Reads the fingerprint keys of a precompute YAML config (configs/precompute.yaml):
/// namespace_name, block_size, dtype, hash_bits, dense_layers (a list or "0,1"), projection_seed.
/// Other keys are left to their readers (precompute's load_config checks them). InvalidArgument:
/// unreadable file, not a mapping, a bad value (the message names the file and the key).
Status read_fingerprint_config(const std::string& path, FingerprintOptions* o);

/// Parses "0,1,5" into sorted unique layer numbers (empty string = no layers). InvalidArgument
/// naming the list for anything else.
Status parse_layers(const std::string& s, std::vector<uint32_t>* out);

/// The namespace descriptor JSON of a loaded model (ucm/model/identity.h's namespace_desc_json
/// with its directory's model id and the digest computed at load).
std::string namespace_desc_json(const LlamaModel& m, const FingerprintOptions& o);

}  // namespace ucm::model
