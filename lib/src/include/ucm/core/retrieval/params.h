// lib/src/retrieval/params.h: retriever settings (ucm_retriever_params, ucm/retrieval.h): the
// defaults, their checks, and the YAML reader behind ucm_retriever_params_load. The defaults and
// where they come from are documented in configs/retrieval.yaml.
#pragma once
#include <cstddef>
#include <string>

#include "ucm/retrieval.h"
#include "ucm/status.h"

namespace ucm::retrieval {

/// The defaults (configs/retrieval.yaml): QUEST, sink 1, local 2, ratio 0.3, min 4, top_k 0,
/// psa_tau 0.95, psa_max_blocks 0, reuse_steps 1, shared_heads 1, honor_dense_layers 1.
ucm_retriever_params default_params();

/// InvalidArgument naming the field: struct_size too small, unknown policy, sparse_ratio not in
/// [0, 1] (or NaN), psa_tau not in (0, 1], reuse_steps 0, shared_heads / honor_dense_layers not
/// 0 or 1.
Status validate_params(const ucm_retriever_params& p);

/// Policy name ("esa", "quest", "gsa", "psa"; any case) -> UCM_POLICY_*; -1 if unknown.
int policy_from_name(const std::string& name);
/// UCM_POLICY_* -> "esa" ... ("unknown" otherwise).
const char* policy_name(int policy);

/// Reads a YAML mapping of ucm_retriever_params keys (struct_size excluded; policy as a name or a
/// number; shared_heads and honor_dense_layers as booleans or 0/1) over default_params().
/// IOError: the file cannot be read; InvalidArgument: not a mapping, an unknown key, a value of
/// the wrong type or out of range (the message names the key and the file).
Status load_params_yaml(const std::string& path, ucm_retriever_params* out);

}  // namespace ucm::retrieval
