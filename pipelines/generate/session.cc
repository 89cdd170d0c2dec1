// pipelines/generate/session.cc: see session.h.
#include "session.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "generate_internal.h"
#include "ucm/model/model_load.h"

namespace ucm::generate {

namespace fs = std::filesystem;

Status Session::open(const SessionOptions& o) {
  UCM_RETURN_IF_ERROR(load(o));
  return open_store();
}

Status Session::load(const SessionOptions& o) {
  o_ = o;
  store_.reset();
  model::LoadOptions lo;
  lo.model_dir = o.model_dir;
  lo.compute_dtype = o.compute_dtype;
  // precompute's default (model::set_compute_threads): fp32 on the CPU runs its GEMMs on
  // OpenBLAS's own threads and libtorch's element-wise work on one; libtorch's default (a thread
  // per core) made the two pools spin against each other.
  lo.threads = 0;
  lo.batched_prefill = false;  // the engine prefills through the cached forward (extend)
  UCM_RETURN_IF_ERROR(model::load_model(lo, &model_, nullptr));
  const std::string tp =
      o.tokenizer_file.empty() ? (fs::path(o.model_dir) / "tokenizer.json").string() : o.tokenizer_file;
  try {
    tokenizer_ = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_file(tp));
  } catch (const std::exception& e) {
    return Status::InvalidArgument("cannot load tokenizer " + tp + ": " + e.what());
  }
  eos_ = -1;
  try {
    std::ifstream f(fs::path(o.model_dir) / "config.json");
    auto j = nlohmann::json::parse(f);
    if (j.contains("eos_token_id") && j["eos_token_id"].is_number_integer()) eos_ = j["eos_token_id"].get<int64_t>();
  } catch (const std::exception&) {
    // the model loaded, so config.json is valid JSON; no eos means "never stop early"
  }
  fp_ = model::FingerprintOptions{};
  if (!o.precompute_config.empty()) UCM_RETURN_IF_ERROR(model::read_fingerprint_config(o.precompute_config, &fp_));
  desc_json_ = model::namespace_desc_json(*model_, fp_);
  return Status::OK();
}

std::string Session::missing_namespace(const std::string& ns) const {
  std::string layers;
  for (uint32_t l : fp_.dense_layers) layers += (layers.empty() ? "" : ",") + std::to_string(l);
  return "store " + o_.store + " holds no namespace " + ns + " for model " + o_.model_dir + " (fingerprint: block_size " +
         std::to_string(fp_.block_size) + ", dtype " + fp_.dtype + ", hash_bits " + std::to_string(fp_.hash_bits) +
         ", dense_layers [" + layers + "], " +
         (o_.precompute_config.empty() ? "precompute's defaults" : "from " + o_.precompute_config) +
         "): precompute into it first (`ucm precompute --model " + o_.model_dir + " --store " + o_.store +
         (o_.precompute_config.empty() ? "" : " --config " + o_.precompute_config) + " ...`)";
}

Status Session::open_store() {
  if (!model_) return Status::InvalidArgument("Session::open_store before load");
  store_.reset();
  if (o_.store.empty()) return Status::OK();
  const bool writer = o_.need == NamespaceNeed::kRegister;
  auto store = std::make_unique<StoreClient>();
  UCM_RETURN_IF_ERROR(store->open(o_.store, writer));
  const Status st = store->resolve_namespace(o_.namespace_name, desc_json_, writer);
  // A namespace asked for by name is always required: nothing would register it under that name.
  if (st.code() == Code::kNotFound && !o_.namespace_name.empty())
    return Status::NotFound(missing_namespace("'" + o_.namespace_name + "'"));
  UCM_RETURN_IF_ERROR(st);
  if (!store->found()) {
    const std::string missing = missing_namespace(store->ns_hex());
    if (o_.need != NamespaceNeed::kOptional) return Status::NotFound(missing);  // kRegister registers, so found
    spdlog::warn("{}; every block misses", missing);
  }
  store_ = std::move(store);
  return Status::OK();
}

Status Session::check_capacity(uint64_t tokens, uint64_t new_tokens, const std::string& what) const {
  const int64_t max = model_->config().max_position_embeddings;
  if (int64_t(tokens + new_tokens) <= max) return Status::OK();
  return Status::InvalidArgument(what + " of " + std::to_string(tokens) + " tokens" +
                                 (new_tokens ? " plus " + std::to_string(new_tokens) + " new tokens" : std::string()) +
                                 " exceeds the model's " + std::to_string(max) + " positions");
}

Engine Session::engine() const {
  return Engine(*model_, store_.get(), fp_.block_size, detail::torch_dtype_of(fp_.dtype));
}

}  // namespace ucm::generate
