// YAML config for `ucm precompute` (configs/precompute.yaml).
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>

#include <sstream>

#include "ucm/model/fingerprint.h"
#include "precompute_internal.h"
#include "ucm/precompute/precompute.h"

namespace ucm::precompute {

Status load_config(const std::string& path, PrecomputeOptions* o) {
  YAML::Node root;
  UCM_RETURN_IF_ERROR(model::load_config_mapping(path, &root));  // read once
  if (root.IsNull()) return Status::OK();
  static const std::set<std::string> known = {
      "model", "tokenizer", "corpus", "corpus_suffix", "store", "template", "namespace_name",
      "block_size", "dtype", "hash_bits", "dense_layers", "projection_seed", "limit", "shard",
      "resume", "strict", "batch_tokens", "max_doc_tokens", "max_batches_in_flight", "sort_window_batches", "device", "compute_dtype", "threads",
      "sglang_page_size"};
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
      else if (key == "device") o->device = v.as<std::string>();
      else if (key == "compute_dtype") o->compute_dtype = v.as<std::string>();
      else if (key == "threads") o->threads = v.as<int>();
      else if (key == "sglang_page_size") o->sglang_page_size = v.as<uint32_t>();
    }
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("config " + path + ": bad value for '" + key + "': " + e.what());
  }
  // The fingerprint keys (namespace_name, block_size, dtype, hash_bits, dense_layers,
  // projection_seed) have one reader, shared with the engine (pipelines/model/include/ucm/model/fingerprint.h).
  return model::read_fingerprint_keys(root, path, &o->fingerprint);
}

Status parse_shard(const std::string& s, uint32_t* index, uint32_t* count) {
  const auto slash = s.find('/');
  try {
    if (slash == std::string::npos) throw std::invalid_argument("no slash");
    size_t p1 = 0, p2 = 0;
    const unsigned long i = std::stoul(s.substr(0, slash), &p1);
    const unsigned long n = std::stoul(s.substr(slash + 1), &p2);
    if (p1 != slash || p2 != s.size() - slash - 1 || n == 0 || i >= n || n > 1u << 20) throw std::invalid_argument("range");
    *index = uint32_t(i);
    *count = uint32_t(n);
  } catch (const std::exception&) {
    return Status::InvalidArgument("bad shard '" + s + "': expected I/N with 0 <= I < N, e.g. 0/4");
  }
  return Status::OK();
}

Status parse_layers(const std::string& s, std::vector<uint32_t>* out) { return model::parse_layers(s, out); }

namespace detail {

Status validate(const PrecomputeOptions& o) {
  if (o.corpus.empty()) return Status::InvalidArgument("no corpus: pass --corpus PATH (JSONL file or directory)");
  const model::FingerprintOptions& fp = o.fingerprint;
  if (fp.block_size == 0 || fp.block_size > 4096)
    return Status::InvalidArgument("--block-size must be in [1, 4096], got " + std::to_string(fp.block_size));
  DType dtype;
  if (Status st = parse_dtype(fp.dtype, &dtype); !st.ok()) return Status::InvalidArgument("--dtype: " + st.message());
  if (fp.hash_bits == 0 || fp.hash_bits % 8 != 0 || fp.hash_bits > 4096)
    return Status::InvalidArgument("--hash-bits must be a positive multiple of 8 (<= 4096), got " +
                                   std::to_string(fp.hash_bits));
  if (o.shard_count == 0 || o.shard_index >= o.shard_count)
    return Status::InvalidArgument("--shard I/N needs 0 <= I < N");
  if (o.batch_tokens == 0) return Status::InvalidArgument("--batch-tokens must be positive");
  if (o.max_doc_tokens && o.max_doc_tokens < fp.block_size)
    return Status::InvalidArgument("--max-doc-tokens must be at least the block size");
  return Status::OK();
}

DType payload_dtype(const PrecomputeOptions& o) {
  DType d = DType::kBF16;
  (void)parse_dtype(o.fingerprint.dtype, &d);  // validate() refused any other name
  return d;
}

DocSourceOptions source_options(const PrecomputeOptions& o) {
  DocSourceOptions s;
  s.path = o.corpus;
  s.suffix = o.corpus_suffix;
  s.template_file = o.template_file;
  s.shard_index = o.shard_index;
  s.shard_count = o.shard_count;
  s.strict = o.strict;
  return s;
}

}  // namespace detail

}  // namespace ucm::precompute
