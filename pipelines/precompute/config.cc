// YAML config for `ucm precompute` (configs/precompute.yaml).
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>

#include "ucm/precompute/precompute.h"

namespace ucm::precompute {

Status load_config(const std::string& path, PrecomputeOptions* o) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const std::exception& e) {
    return Status::InvalidArgument("config " + path + ": " + e.what());
  }
  if (root.IsNull()) return Status::OK();
  if (!root.IsMap()) return Status::InvalidArgument("config " + path + ": expected a mapping of option: value");
  static const std::set<std::string> known = {
      "model", "tokenizer", "corpus", "corpus_suffix", "store", "template", "namespace_name",
      "block_size", "dtype", "hash_bits", "dense_layers", "projection_seed", "limit", "shard",
      "resume", "strict", "batch_tokens", "max_doc_tokens", "max_batches_in_flight", "sort_window_batches"};
  std::string key;
  try {
    for (const auto& kv : root) {
      key = kv.first.as<std::string>();
      const YAML::Node& v = kv.second;
      if (!known.count(key))
        return Status::InvalidArgument("config " + path + ": unknown key '" + key + "' (see configs/precompute.yaml)");
      if (key == "model") o->model_dir = v.as<std::string>();
      else if (key == "tokenizer") o->tokenizer_file = v.as<std::string>();
      else if (key == "corpus") o->corpus = v.as<std::string>();
      else if (key == "corpus_suffix") o->corpus_suffix = v.as<std::string>();
      else if (key == "store") o->store = v.as<std::string>();
      else if (key == "template") o->template_file = v.as<std::string>();
      else if (key == "namespace_name") o->namespace_name = v.as<std::string>();
      else if (key == "block_size") o->block_size = v.as<uint32_t>();
      else if (key == "dtype") {
        Status st = parse_dtype(v.as<std::string>(), &o->dtype);
        if (!st.ok()) return Status::InvalidArgument("config " + path + ": dtype: " + st.message());
      } else if (key == "hash_bits") o->hash_bits = v.as<uint32_t>();
      else if (key == "dense_layers") {
        o->dense_layers.clear();
        if (v.IsSequence()) {
          for (const auto& x : v) o->dense_layers.push_back(x.as<uint32_t>());
        } else if (!v.IsNull()) {
          Status st = parse_layers(v.as<std::string>(), &o->dense_layers);
          if (!st.ok()) return Status::InvalidArgument("config " + path + ": " + st.message());
        }
        std::sort(o->dense_layers.begin(), o->dense_layers.end());
        o->dense_layers.erase(std::unique(o->dense_layers.begin(), o->dense_layers.end()), o->dense_layers.end());
      } else if (key == "projection_seed") o->projection_seed = v.as<uint64_t>();
      else if (key == "limit") o->limit = v.as<uint64_t>();
      else if (key == "shard") {
        Status st = parse_shard(v.as<std::string>(), &o->shard_index, &o->shard_count);
        if (!st.ok()) return Status::InvalidArgument("config " + path + ": " + st.message());
      } else if (key == "resume") o->resume = v.as<bool>();
      else if (key == "strict") o->strict = v.as<bool>();
      else if (key == "batch_tokens") o->batch_tokens = v.as<uint64_t>();
      else if (key == "max_doc_tokens") o->max_doc_tokens = v.as<uint64_t>();
      else if (key == "max_batches_in_flight") o->max_batches_in_flight = v.as<uint32_t>();
      else if (key == "sort_window_batches") o->sort_window_batches = v.as<uint32_t>();
    }
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("config " + path + ": bad value for '" + key + "': " + e.what());
  }
  return Status::OK();
}

}  // namespace ucm::precompute
