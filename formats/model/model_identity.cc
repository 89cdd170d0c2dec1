// formats/model/model_identity.cc: a model's namespace identity (ucm/model/identity.h).
#include "ucm/model/identity.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "ucm/safetensors/safetensors.h"

namespace ucm::model {

namespace fs = std::filesystem;
namespace st = ucm::safetensors;

std::string weights_digest(const st::Collection& c) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_md5(), nullptr) != 1) throw ModelError("OpenSSL MD5 init failed");
  const char zero = '\0';
  for (const auto& name : c.names()) {  // names() is sorted byte-wise (std::string <)
    auto e = c.at(name);
    const char* dt = st::dtype_name(e.info->dtype);
    auto d = e.data();
    EVP_DigestUpdate(ctx.get(), name.data(), name.size());
    EVP_DigestUpdate(ctx.get(), &zero, 1);
    EVP_DigestUpdate(ctx.get(), dt, std::strlen(dt));
    EVP_DigestUpdate(ctx.get(), &zero, 1);
    EVP_DigestUpdate(ctx.get(), d.data(), d.size());
  }
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx.get(), out, &n) != 1) throw ModelError("OpenSSL MD5 final failed");
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned int i = 0; i < n; ++i) {
    s += hex[out[i] >> 4];
    s += hex[out[i] & 15];
  }
  return s;
}

std::string model_id_of(const std::string& dir) {
  std::ifstream f(fs::path(dir) / "config.json");
  if (f) {
    try {
      auto j = nlohmann::json::parse(f);
      if (j.contains("_name_or_path") && j["_name_or_path"].is_string()) {
        std::string n = j["_name_or_path"].get<std::string>();
        while (!n.empty() && n.back() == '/') n.pop_back();
        if (!n.empty()) return fs::path(n).filename().string();
      }
    } catch (const std::exception&) {
      // ModelConfig::from_json_file reports a bad config.json
    }
  }
  fs::path p = fs::absolute(fs::path(dir)).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string();
}

std::string namespace_desc_json(const std::string& model_id, const std::string& digest, const ModelConfig& c,
                                const FingerprintOptions& o) {
  nlohmann::json j = {
      {"model_id", model_id},
      {"weights_digest", digest},
      {"dtype", o.dtype},
      {"block_size", o.block_size},
      {"num_layers", uint32_t(c.num_hidden_layers)},
      {"num_kv_heads", uint32_t(c.num_key_value_heads)},
      {"head_dim", uint32_t(c.head_dim)},
      {"layout", 1},
      {"hash_scheme", "md5-chain-v1"},
      {"extra",
       {{"hash_bits", o.hash_bits},
        {"dense_layers", o.dense_layers},
        {"repr", {"R0", "R1", "R4"}},
        {"projection_seed", o.projection_seed}}},
  };
  if (!o.namespace_name.empty()) j["name"] = o.namespace_name;
  return j.dump();
}

namespace {

Status check_options(const FingerprintOptions& o) {
  if (o.dtype != "bf16" && o.dtype != "fp16" && o.dtype != "fp32")
    return Status::InvalidArgument("fingerprint: dtype '" + o.dtype + "' (expected bf16, fp16 or fp32)");
  if (o.block_size == 0) return Status::InvalidArgument("fingerprint: block_size must be positive");
  if (o.hash_bits == 0 || o.hash_bits % 8 != 0)
    return Status::InvalidArgument("fingerprint: hash_bits must be a positive multiple of 8, got " +
                                   std::to_string(o.hash_bits));
  return Status::OK();
}

}  // namespace

Status model_fingerprint(const std::string& dir, const FingerprintOptions& o, std::string* desc_json) {
  Status s = check_options(o);
  if (!s.ok()) return s;
  try {
    const ModelConfig c = ModelConfig::geometry_from_json_file((fs::path(dir) / "config.json").string());
    const st::Collection w = st::Collection::open_dir(dir);
    *desc_json = namespace_desc_json(model_id_of(dir), weights_digest(w), c, o);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("model ") + dir + ": " + e.what());
  }
  return Status::OK();
}

Status fingerprint_options_from_json(const std::string& text, FingerprintOptions* o) {
  *o = FingerprintOptions{};
  if (text.empty()) return Status::OK();
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return Status::InvalidArgument("fingerprint options: not a JSON object: " + text);
  std::string key;
  try {
    for (const auto& [k, v] : j.items()) {
      key = k;
      if (k == "dtype") o->dtype = v.get<std::string>();
      else if (k == "block_size") o->block_size = v.get<uint32_t>();
      else if (k == "hash_bits") o->hash_bits = v.get<uint32_t>();
      else if (k == "projection_seed") o->projection_seed = v.get<uint64_t>();
      else if (k == "namespace_name") o->namespace_name = v.get<std::string>();
      else if (k == "dense_layers") o->dense_layers = v.get<std::vector<uint32_t>>();
      else return Status::InvalidArgument("fingerprint options: unknown key '" + k + "'");
    }
  } catch (const std::exception& e) {
    return Status::InvalidArgument("fingerprint options: bad value for '" + key + "': " + e.what());
  }
  std::sort(o->dense_layers.begin(), o->dense_layers.end());
  o->dense_layers.erase(std::unique(o->dense_layers.begin(), o->dense_layers.end()), o->dense_layers.end());
  return check_options(*o);
}

}  // namespace ucm::model
