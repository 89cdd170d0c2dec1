// lib/src/retrieval/params.cc: retriever defaults, checks and YAML reader (see params.h).
#include "ucm/core/retrieval/params.h"

#include "ucm/core/c_struct.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>

namespace ucm::retrieval {

ucm_retriever_params default_params() {
  ucm_retriever_params p{};
  p.struct_size = sizeof(ucm_retriever_params);
  p.policy = UCM_POLICY_QUEST;  // configs/retrieval.yaml: bounds beat mean keys (ArkVale, NeurIPS 2024)
  p.sink_blocks = 1;            // UCM GSA's init_window_sz
  p.local_blocks = 2;           // UCM GSA's local_window_sz
  p.sparse_ratio = 0.3f;        // UCM GSA's sparse_ratio; UCM's ESA / KVStar configs
  p.min_blocks = 4;             // UCM GSA's min_blocks
  p.top_k = 0;                  // UCM's GSA: k from ratio and min_blocks
  p.psa_tau = 0.95f;            // PSA (arXiv:2503.00392) §3.2: "e.g. 95%"
  p.psa_max_blocks = 0;
  p.reuse_steps = 1;            // UCM's GSA: selection every scheduler step
  p.shared_heads = 1;           // UCM's GSA: one selected_blocks list per request
  p.honor_dense_layers = 1;     // extra.dense_layers, recorded by precompute for servers
  return p;
}

int policy_from_name(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (n == "esa") return UCM_POLICY_ESA;
  if (n == "quest") return UCM_POLICY_QUEST;
  if (n == "gsa") return UCM_POLICY_GSA;
  if (n == "psa") return UCM_POLICY_PSA;
  return -1;
}

const char* policy_name(int policy) {
  switch (policy) {
    case UCM_POLICY_ESA: return "esa";
    case UCM_POLICY_QUEST: return "quest";
    case UCM_POLICY_GSA: return "gsa";
    case UCM_POLICY_PSA: return "psa";
    default: return "unknown";
  }
}

Status validate_params(const ucm_retriever_params& p) {
  auto bad = [](const std::string& m) { return Status::InvalidArgument("retriever params: " + m); };
  UCM_RETURN_IF_ERROR(capi::check_struct_size<ucm_retriever_params>("retriever params: params", p.struct_size));
  if (p.policy < UCM_POLICY_ESA || p.policy > UCM_POLICY_PSA)
    return bad("policy " + std::to_string(p.policy) + " is not a UCM_POLICY_* value");
  if (!(p.sparse_ratio >= 0.0f && p.sparse_ratio <= 1.0f))
    return bad("sparse_ratio " + std::to_string(p.sparse_ratio) + " is not in [0, 1]");
  if (!(p.psa_tau > 0.0f && p.psa_tau <= 1.0f)) return bad("psa_tau " + std::to_string(p.psa_tau) + " is not in (0, 1]");
  if (p.reuse_steps == 0) return bad("reuse_steps is 0 (1 = select every step)");
  if (p.shared_heads != 0 && p.shared_heads != 1) return bad("shared_heads must be 0 or 1");
  if (p.honor_dense_layers != 0 && p.honor_dense_layers != 1) return bad("honor_dense_layers must be 0 or 1");
  return Status::OK();
}

Status load_params_yaml(const std::string& path, ucm_retriever_params* out) {
  {
    std::ifstream f(path);
    if (!f) return Status::IOError("cannot read retriever params file " + path);
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(path + ": not valid YAML: " + e.what());
  }
  ucm_retriever_params p = default_params();
  if (root.IsNull()) {
    *out = p;
    return Status::OK();
  }
  if (!root.IsMap()) return Status::InvalidArgument(path + ": expected a mapping of retriever settings");
  auto as_bool01 = [](const YAML::Node& v) -> int32_t {
    try {
      return v.as<bool>() ? 1 : 0;
    } catch (const YAML::Exception&) {
      const int x = v.as<int>();
      if (x != 0 && x != 1) throw YAML::BadConversion(v.Mark());
      return x;
    }
  };
  const std::map<std::string, std::function<void(const YAML::Node&)>> setters = {
      {"policy",
       [&](const YAML::Node& v) {
         int pol = policy_from_name(v.as<std::string>());
         if (pol < 0) {
           try {
             pol = v.as<int>();
           } catch (const YAML::Exception&) {
             throw YAML::BadConversion(v.Mark());
           }
         }
         p.policy = pol;
       }},
      {"sink_blocks", [&](const YAML::Node& v) { p.sink_blocks = v.as<uint32_t>(); }},
      {"local_blocks", [&](const YAML::Node& v) { p.local_blocks = v.as<uint32_t>(); }},
      {"sparse_ratio", [&](const YAML::Node& v) { p.sparse_ratio = v.as<float>(); }},
      {"min_blocks", [&](const YAML::Node& v) { p.min_blocks = v.as<uint32_t>(); }},
      {"top_k", [&](const YAML::Node& v) { p.top_k = v.as<uint32_t>(); }},
      {"psa_tau", [&](const YAML::Node& v) { p.psa_tau = v.as<float>(); }},
      {"psa_max_blocks", [&](const YAML::Node& v) { p.psa_max_blocks = v.as<uint32_t>(); }},
      {"reuse_steps", [&](const YAML::Node& v) { p.reuse_steps = v.as<uint32_t>(); }},
      {"shared_heads", [&](const YAML::Node& v) { p.shared_heads = as_bool01(v); }},
      {"honor_dense_layers", [&](const YAML::Node& v) { p.honor_dense_layers = as_bool01(v); }},
  };
  for (const auto& kv : root) {
    std::string key;
    try {
      key = kv.first.as<std::string>();
    } catch (const YAML::Exception&) {
      return Status::InvalidArgument(path + ": a key is not a string");
    }
    auto it = setters.find(key);
    if (it == setters.end()) return Status::InvalidArgument(path + ": unknown key \"" + key + "\"");
    try {
      if (!kv.second.IsScalar()) throw YAML::BadConversion(kv.second.Mark());
      it->second(kv.second);
    } catch (const YAML::Exception&) {
      return Status::InvalidArgument(path + ": bad value for \"" + key + "\": " + kv.second.as<std::string>(""));
    }
    Status s = validate_params(p);
    if (!s.ok()) return Status::InvalidArgument(path + ": \"" + key + "\": " + s.message());
  }
  *out = p;
  return Status::OK();
}

}  // namespace ucm::retrieval
