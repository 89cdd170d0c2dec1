// pipelines/model/fingerprint.cc: see fingerprint.h.
#include "ucm/model/fingerprint.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ucm/model/llama_model.h"
#include "ucm/strings.h"

namespace ucm::model {

namespace fs = std::filesystem;

Status parse_layers(const std::string& s, std::vector<uint32_t>* out) {
  out->clear();
  for (const std::string& item : split_comma(s)) {
    if (item.empty()) continue;
    try {
      size_t p = 0;
      const unsigned long v = std::stoul(item, &p);
      if (p != item.size() || v > 100000) throw std::invalid_argument(item);
      out->push_back(uint32_t(v));
    } catch (const std::exception&) {
      return Status::InvalidArgument("bad layer list '" + s + "': expected comma-separated layer numbers, e.g. 0,1");
    }
  }
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
  return Status::OK();
}

Status load_config_mapping(const std::string& path, YAML::Node* root) {
  try {
    *root = YAML::LoadFile(path);
  } catch (const std::exception& e) {
    return Status::InvalidArgument("config " + path + ": " + e.what());
  }
  if (!root->IsNull() && !root->IsMap())
    return Status::InvalidArgument("config " + path + ": expected a mapping of option: value");
  return Status::OK();
}

Status read_fingerprint_config(const std::string& path, FingerprintOptions* o) {
  YAML::Node root;
  UCM_RETURN_IF_ERROR(load_config_mapping(path, &root));
  return root.IsNull() ? Status::OK() : read_fingerprint_keys(root, path, o);
}

Status read_fingerprint_keys(const YAML::Node& root, const std::string& path, FingerprintOptions* o) {
  std::string key;
  try {
    for (const auto& kv : root) {
      key = kv.first.as<std::string>();
      const YAML::Node& v = kv.second;
      if (key == "namespace_name") {
        o->namespace_name = v.as<std::string>();
      } else if (key == "block_size") {
        o->block_size = v.as<uint32_t>();
      } else if (key == "dtype") {
        const std::string d = v.as<std::string>();
        if (d != "bf16" && d != "fp16" && d != "fp32")
          return Status::InvalidArgument("config " + path + ": dtype: unknown dtype '" + d + "' (bf16, fp16, fp32)");
        o->dtype = d;
      } else if (key == "hash_bits") {
        o->hash_bits = v.as<uint32_t>();
      } else if (key == "dense_layers") {
        o->dense_layers.clear();
        if (v.IsSequence()) {
          for (const auto& x : v) o->dense_layers.push_back(x.as<uint32_t>());
        } else if (!v.IsNull()) {
          Status st = parse_layers(v.as<std::string>(), &o->dense_layers);
          if (!st.ok()) return Status::InvalidArgument("config " + path + ": " + st.message());
        }
        std::sort(o->dense_layers.begin(), o->dense_layers.end());
        o->dense_layers.erase(std::unique(o->dense_layers.begin(), o->dense_layers.end()), o->dense_layers.end());
      } else if (key == "projection_seed") {
        o->projection_seed = v.as<uint64_t>();
      }
    }
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("config " + path + ": bad value for '" + key + "': " + e.what());
  }
  return Status::OK();
}

std::string namespace_desc_json(const LlamaModel& m, const FingerprintOptions& o) {
  return namespace_desc_json(model_id_of(m.dir()), m.weights_digest(), m.config(), o);
}

}  // namespace ucm::model
