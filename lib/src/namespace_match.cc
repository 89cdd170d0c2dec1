// lib/src/namespace_match.cc: the namespace a model may use (store_v1.md §7.3).
#include <algorithm>
#include <nlohmann/json.hpp>

#include "ucm/namespace_match.h"

namespace ucm {
namespace {

bool is_adapter(const NamespaceDesc& d) {
  const auto j = nlohmann::json::parse(d.extra_json, nullptr, false);
  return j.is_object() && j.contains("lora");
}

std::string hex_of(const NamespaceId& id) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : id) s += {hex[b >> 4], hex[b & 15]};
  return s;
}

// want's fingerprint, for the messages.
std::string describe(const NamespaceDesc& w, uint32_t engine_block) {
  return "model_id " + w.model_id + ", weights_digest " + w.weights_digest + ", dtype " + dtype_name(w.dtype) +
         ", layers " + std::to_string(w.num_layers) + ", kv heads " + std::to_string(w.num_kv_heads) + ", head_dim " +
         std::to_string(w.head_dim) +
         (engine_block ? ", block size dividing " + std::to_string(engine_block)
                       : ", block_size " + std::to_string(w.block_size));
}

// Every fingerprint field in which s differs from w (extra too), for precompute's refusal to add
// a second fingerprint of one model.
std::string full_diff(const NamespaceDesc& s, const NamespaceDesc& w) {
  std::string why = namespace_mismatch(s, w, 0);
  const auto a = nlohmann::json::parse(s.extra_json, nullptr, false), b = nlohmann::json::parse(w.extra_json, nullptr, false);
  if (a != b) why += (why.empty() ? "" : "; ") + ("extra " + a.dump() + " (store) vs " + b.dump() + " (this model)");
  return why;
}

}  // namespace

std::string namespace_mismatch(const NamespaceDesc& s, const NamespaceDesc& w, uint32_t engine_block) {
  std::vector<std::string> d;
  auto add = [&](const char* f, const std::string& x, const std::string& y) {
    if (x != y) d.push_back(std::string(f) + " " + x + " (store) vs " + y + " (this model)");
  };
  if (is_adapter(s)) d.push_back("a LoRA adapter's namespace (store_v1.md §7.2)");
  add("hash_scheme", s.hash_scheme, w.hash_scheme);
  add("model_id", s.model_id, w.model_id);
  add("weights_digest", s.weights_digest, w.weights_digest);
  add("dtype", dtype_name(s.dtype), dtype_name(w.dtype));
  add("num_layers", std::to_string(s.num_layers), std::to_string(w.num_layers));
  add("num_kv_heads", std::to_string(s.num_kv_heads), std::to_string(w.num_kv_heads));
  add("head_dim", std::to_string(s.head_dim), std::to_string(w.head_dim));
  add("layout", std::to_string(s.layout), std::to_string(w.layout));
  if (engine_block == 0)
    add("block_size", std::to_string(s.block_size), std::to_string(w.block_size));
  else if (s.block_size == 0 || engine_block % s.block_size != 0)
    d.push_back("block_size " + std::to_string(s.block_size) + " does not divide the engine's " +
                std::to_string(engine_block));
  std::string out;
  for (size_t i = 0; i < d.size(); ++i) out += (i ? "; " : "") + d[i];
  return out;
}

NamespaceMatch match_namespace(const std::vector<NamespaceDesc>& listed, const NamespaceDesc& want,
                               uint32_t engine_block, const std::string& store) {
  NamespaceMatch m;
  const NamespaceId want_id = want.id();
  std::string others;
  auto better = [&](const NamespaceDesc& a, const NamespaceId& ia) {  // a ranks above m's pick
    if (ia == want_id) return true;
    if (m.exact) return false;
    if (a.block_size != m.desc.block_size) return a.block_size > m.desc.block_size;
    if (a.display_name() != m.desc.display_name()) return a.display_name() < m.desc.display_name();
    return ia < m.id;
  };
  for (const auto& d : listed) {
    const std::string why = namespace_mismatch(d, want, engine_block);
    const NamespaceId id = d.id();
    if (d.model_id == want.model_id && id != want_id)
      m.same_model.push_back("'" + d.display_name() + "': " + full_diff(d, want));
    if (!why.empty()) {
      others += (others.empty() ? "" : "; ") + d.display_name() + ": " + why;
      continue;
    }
    if (!m.found || better(d, id)) {
      m.found = true;
      m.exact = id == want_id;
      m.desc = d;
      m.id = id;
    }
  }
  if (!m.found)
    m.message = "store " + store + " has no namespace for this model (" + describe(want, engine_block) +
                "; its id would be " + hex_of(want_id) + "). Store namespaces: " +
                (others.empty() ? "none" : others);
  return m;
}

}  // namespace ucm
