// lib/src/document.cc: see document.h.
#include "lib/src/document.h"

#include <nlohmann/json.hpp>

#include "formats/store/records.h"

namespace ucm {

std::string document_to_json(const DocumentEntry& doc) {
  nlohmann::json j;
  j["id"] = doc.id;
  j["first_block"] = to_hex(doc.first_block);
  j["last_block"] = to_hex(doc.last_block);
  j["blocks"] = doc.blocks;
  j["tokens"] = doc.tokens;
  j["source"] = doc.source;
  j["created_ms"] = doc.created_ms ? doc.created_ms : fmt::now_ms();
  return j.dump();
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
    d->blocks = j.value("blocks", 0u);
    d->tokens = j.value("tokens", uint64_t(0));
    d->source = j.value("source", std::string());
    d->created_ms = j.value("created_ms", uint64_t(0));
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("document registry entry is malformed: ") + e.what());
  }
  return Status::OK();
}

}  // namespace ucm
