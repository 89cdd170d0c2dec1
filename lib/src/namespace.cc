// lib/src/namespace.cc: namespace descriptors and ids (store_v1.md §7).
#include "ucm/namespace.h"

#include <openssl/evp.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace ucm {

const char* dtype_name(DType d) {
  switch (d) {
    case DType::kBF16: return "bf16";
    case DType::kFP16: return "fp16";
    case DType::kFP32: return "fp32";
  }
  return "unknown";
}

Status parse_dtype(std::string_view s, DType* out) {
  if (s == "bf16") *out = DType::kBF16;
  else if (s == "fp16") *out = DType::kFP16;
  else if (s == "fp32") *out = DType::kFP32;
  else return Status::InvalidArgument("unknown dtype \"" + std::string(s) + "\"; use bf16, fp16 or fp32");
  return Status::OK();
}

size_t dtype_size(DType d) { return d == DType::kFP32 ? 4 : 2; }

namespace {
// Descriptors nest a few levels (extra is producer-defined). nlohmann's parser is iterative, but
// dump() and copies recurse once per level, so deeper JSON is refused before it is used.
constexpr int kMaxJsonDepth = 64;

// Parses without exceptions (discarded on a syntax error); *depth = the deepest nesting seen.
nlohmann::json parse_json(std::string_view text, int* depth) {
  *depth = 0;
  const nlohmann::json::parser_callback_t track = [depth](int d, nlohmann::json::parse_event_t, nlohmann::json&) {
    *depth = std::max(*depth, d);
    return true;
  };
  return nlohmann::json::parse(text, track, false);
}

// A required (def == nullptr) or optional unsigned 32-bit field; throws std::invalid_argument
// (naming the field) for anything but an integer in [0, 2^32): a float outside the range would
// otherwise be converted with undefined behaviour.
uint32_t u32_field(const nlohmann::json& j, const char* key, const uint32_t* def) {
  const auto it = j.find(key);
  if (it == j.end()) {
    if (def) return *def;
    throw std::invalid_argument(std::string("missing \"") + key + "\"");
  }
  if (!it->is_number_unsigned() || it->get<uint64_t>() > 0xffffffffu)
    throw std::invalid_argument(std::string("\"") + key + "\" must be an integer in [0, 4294967295], got " +
                                (it->is_number() ? it->dump() : std::string("a ") + it->type_name()));
  return static_cast<uint32_t>(it->get<uint64_t>());
}

// nlohmann::json (std::map based) keeps keys sorted, so dump() is canonical.
nlohmann::json fingerprint_json(const NamespaceDesc& d) {
  nlohmann::json j;
  j["model_id"] = d.model_id;
  j["weights_digest"] = d.weights_digest;
  j["dtype"] = dtype_name(d.dtype);
  j["block_size"] = d.block_size;
  j["num_layers"] = d.num_layers;
  j["num_kv_heads"] = d.num_kv_heads;
  j["head_dim"] = d.head_dim;
  j["layout"] = d.layout;
  j["hash_scheme"] = d.hash_scheme;
  nlohmann::json extra = nlohmann::json::parse(d.extra_json.empty() ? "{}" : d.extra_json, nullptr, false);
  j["extra"] = extra.is_discarded() ? nlohmann::json(d.extra_json) : extra;
  return j;
}
}  // namespace

std::string NamespaceDesc::canonical_json() const { return fingerprint_json(*this).dump(); }

NamespaceId NamespaceDesc::id() const {
  std::string c = canonical_json();
  NamespaceId out{};
  unsigned int n = 0;
  EVP_Digest(c.data(), c.size(), out.data(), &n, EVP_md5(), nullptr);
  return out;
}

namespace {
// extra.hash_seed_namespace (§7.1): InvalidArgument when present but not 32 hex digits,
// NotFound when absent.
Status extra_hash_seed(const std::string& extra_json, NamespaceId* out) {
  auto e = nlohmann::json::parse(extra_json.empty() ? "{}" : extra_json, nullptr, false);
  if (e.is_discarded() || !e.is_object() || !e.contains("hash_seed_namespace")) return Status::NotFound("no hash seed");
  const auto& v = e["hash_seed_namespace"];
  if (!v.is_string() || v.get<std::string>().size() != 32 || !parse_hex16(v.get<std::string>(), out).ok())
    return Status::InvalidArgument("extra.hash_seed_namespace must be a namespace id of 32 hex digits, got " + v.dump());
  return Status::OK();
}
}  // namespace

NamespaceId NamespaceDesc::hash_seed() const {
  NamespaceId seed{};
  if (extra_hash_seed(extra_json, &seed).ok()) return seed;
  return id();
}

std::string NamespaceDesc::display_name() const {
  if (!name.empty()) return name;
  return model_id + "/" + dtype_name(dtype) + "/b" + std::to_string(block_size) + "/" + to_hex(id()).substr(0, 8);
}

uint64_t NamespaceDesc::payload_bytes() const {
  return uint64_t(num_layers) * 2 * block_size * num_kv_heads * head_dim * dtype_size(dtype);
}

Status NamespaceDesc::validate() const {
  if (model_id.empty()) return Status::InvalidArgument("namespace: model_id is empty");
  if (block_size == 0 || num_layers == 0 || num_kv_heads == 0 || head_dim == 0)
    return Status::InvalidArgument("namespace " + model_id + ": block_size, num_layers, num_kv_heads and head_dim "
                                   "must all be > 0 (got " + std::to_string(block_size) + ", " +
                                   std::to_string(num_layers) + ", " + std::to_string(num_kv_heads) + ", " +
                                   std::to_string(head_dim) + ")");
  if (block_size > 65536 || num_layers > 4096 || num_kv_heads > 4096 || head_dim > 4096)
    return Status::InvalidArgument("namespace " + model_id + ": a dimension is implausibly large");
  if (layout != 1) return Status::InvalidArgument("namespace " + model_id + ": unknown layout " + std::to_string(layout) + " (only 1 exists)");
  if (hash_scheme != "md5-chain-v1" && hash_scheme != kSglangPageScheme)
    return Status::InvalidArgument("namespace " + model_id + ": unknown hash_scheme \"" + hash_scheme +
                                   "\" (md5-chain-v1, or sglang-sha256-page-v1: store_v1.md §12.2)");
  int depth = 0;
  auto e = parse_json(extra_json.empty() ? "{}" : extra_json, &depth);
  if (e.is_discarded() || !e.is_object())
    return Status::InvalidArgument("namespace " + model_id + ": extra must be a JSON object, got " + extra_json);
  if (depth > kMaxJsonDepth)
    return Status::InvalidArgument("namespace " + model_id + ": extra is nested deeper than " +
                                   std::to_string(kMaxJsonDepth) + " levels");
  {
    NamespaceId seed;
    Status hs = extra_hash_seed(extra_json, &seed);
    if (hs.code() == Code::kInvalidArgument) return Status::InvalidArgument("namespace " + model_id + ": " + hs.message());
  }
  if (dtype != DType::kBF16 && dtype != DType::kFP16 && dtype != DType::kFP32)
    return Status::InvalidArgument("namespace " + model_id + ": bad dtype");
  if (is_sglang_pages()) {  // §12.2: extra.sglang_pages = {of, page_size == block_size, head_begin < head_end <= num_kv_heads}
    const auto& sp = e.contains("sglang_pages") ? e["sglang_pages"] : nlohmann::json();
    auto u = [&](const char* k) { return sp.is_object() && sp.contains(k) && sp[k].is_number_unsigned(); };
    if (!sp.is_object() || !sp.contains("of") || !sp["of"].is_string() || sp["of"].get<std::string>().size() != 32 ||
        !u("page_size") || !u("head_begin") || !u("head_end") || !u("num_kv_heads") ||
        sp["page_size"].get<uint64_t>() != block_size ||
        sp["head_begin"].get<uint64_t>() >= sp["head_end"].get<uint64_t>() ||
        sp["head_end"].get<uint64_t>() > sp["num_kv_heads"].get<uint64_t>() ||
        sp["head_end"].get<uint64_t>() - sp["head_begin"].get<uint64_t>() != num_kv_heads)
      return Status::InvalidArgument("namespace " + model_id + ": an SGLang page namespace needs extra.sglang_pages = "
                                     "{\"of\": <32 hex>, \"page_size\": block_size, \"head_begin\", \"head_end\" "
                                     "(num_kv_heads of them), \"num_kv_heads\"} (store_v1.md §12.2), got " + extra_json);
  }
  return Status::OK();
}

std::string NamespaceDesc::to_json() const {
  nlohmann::json j = fingerprint_json(*this);
  j["name"] = display_name();
  return j.dump();
}

Status NamespaceDesc::from_json(std::string_view json, NamespaceDesc* out) {
  int depth = 0;
  auto j = parse_json(json, &depth);
  if (j.is_discarded() || !j.is_object())
    return Status::InvalidArgument("namespace descriptor is not a JSON object: " + std::string(json.substr(0, 200)));
  if (depth > kMaxJsonDepth)
    return Status::InvalidArgument("namespace descriptor is nested deeper than " + std::to_string(kMaxJsonDepth) +
                                   " levels");
  NamespaceDesc d;
  try {
    d.model_id = j.at("model_id").get<std::string>();
    d.weights_digest = j.value("weights_digest", std::string());
    Status s = parse_dtype(j.value("dtype", std::string("bf16")), &d.dtype);
    if (!s.ok()) return s;
    const uint32_t block_size = 16, layout = 1;
    d.block_size = u32_field(j, "block_size", &block_size);
    d.num_layers = u32_field(j, "num_layers", nullptr);
    d.num_kv_heads = u32_field(j, "num_kv_heads", nullptr);
    d.head_dim = u32_field(j, "head_dim", nullptr);
    d.layout = u32_field(j, "layout", &layout);
    d.hash_scheme = j.value("hash_scheme", std::string("md5-chain-v1"));
    d.extra_json = j.contains("extra") ? j["extra"].dump() : "{}";
    d.name = j.value("name", std::string());
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("namespace descriptor: ") + e.what() +
                                   " (needs model_id, num_layers, num_kv_heads, head_dim)");
  }
  Status s = d.validate();
  if (!s.ok()) return s;
  *out = std::move(d);
  return Status::OK();
}

}  // namespace ucm
