// lib/src/document.cc: see document.h.
#include "ucm/core/document.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "ucm/format/format.h"

namespace ucm {

namespace {
// An optional unsigned counter; throws std::invalid_argument (naming it) for anything but an
// integer in [0, max]: a float outside the range would be converted with undefined behaviour.
uint64_t counter(const nlohmann::json& j, const char* key, uint64_t max) {
  const auto it = j.find(key);
  if (it == j.end()) return 0;
  if (!it->is_number_unsigned() || it->get<uint64_t>() > max)
    throw std::invalid_argument(std::string("\"") + key + "\" must be an integer in [0, " + std::to_string(max) +
                                "], got " + (it->is_number() ? it->dump() : std::string("a ") + it->type_name()));
  return it->get<uint64_t>();
}
}  // namespace

std::string document_to_json(const DocumentEntry& doc) {
  nlohmann::json j;
  j["id"] = doc.id;
  j["first_block"] = to_hex(doc.first_block);
  j["last_block"] = to_hex(doc.last_block);
  j["blocks"] = doc.blocks;
  j["tokens"] = doc.tokens;
  j["source"] = doc.source;
  j["created_ms"] = doc.created_ms ? doc.created_ms : fmt::now_ms();
  if (!doc.input.empty()) j["input"] = doc.input;  // absent = "text" (store_v1.md §5.6)
  return j.dump();
}

bool document_complete(const DocumentEntry& d, const std::function<bool(const BlockHash&, BlockHash*)>& parent_of) {
  if (d.blocks == 0) return false;
  BlockHash h = d.last_block;
  for (uint32_t k = 0; k < d.blocks; ++k) {
    BlockHash parent{};
    if (!parent_of(h, &parent)) return false;
    if (k + 1 == d.blocks) return h == d.first_block;
    h = parent;
  }
  return false;
}

Status document_from_json(const std::string& json, DocumentEntry* d) {
  const auto j = nlohmann::json::parse(json, nullptr, false);
  if (!j.is_object()) return Status::Corruption("document registry entry is not a JSON object");
  try {
    d->id = j.at("id").get<std::string>();
    Status s = parse_hex16(j.at("first_block").get<std::string>(), &d->first_block);
    if (!s.ok()) return Status::Corruption("document registry entry: first_block: " + s.message());
    s = parse_hex16(j.at("last_block").get<std::string>(), &d->last_block);
    if (!s.ok()) return Status::Corruption("document registry entry: last_block: " + s.message());
    d->blocks = static_cast<uint32_t>(counter(j, "blocks", UINT32_MAX));
    d->tokens = counter(j, "tokens", UINT64_MAX);
    d->source = j.value("source", std::string());
    d->created_ms = counter(j, "created_ms", UINT64_MAX);
    d->input = j.value("input", std::string());
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("document registry entry is malformed: ") + e.what());
  }
  return Status::OK();
}

}  // namespace ucm
