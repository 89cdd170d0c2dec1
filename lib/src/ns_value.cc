// lib/src/ns_value.cc: see ucm/core/ns_value.h.
#include "ucm/core/ns_value.h"

#include <algorithm>
#include <cstdint>

namespace ucm {

namespace {
using json = nlohmann::json;

bool unsigned_at(const json& a, size_t i, uint64_t max, uint64_t* out) {
  if (!a[i].is_number_unsigned() && !(a[i].is_number_integer() && a[i].get<int64_t>() >= 0)) return false;
  const uint64_t v = a[i].get<uint64_t>();
  if (v > max) return false;
  *out = v;
  return true;
}

// An optional counter: absent is 0; a negative integer (never written, but harmless) is 0.
bool counter(const json& j, const char* key, uint64_t* out) {
  *out = 0;
  const auto it = j.find(key);
  if (it == j.end()) return true;
  if (it->is_number_unsigned()) *out = it->get<uint64_t>();
  else if (it->is_number_integer()) *out = uint64_t(std::max<int64_t>(0, it->get<int64_t>()));
  else return false;
  return true;
}
}  // namespace

NsIndexValue NsIndexValue::Fresh(const std::string& desc_json, uint32_t file, uint64_t offset) {
  NsIndexValue v;
  v.descriptor = json::parse(desc_json, nullptr, false);
  if (!v.descriptor.is_object()) v.descriptor = json::object();
  v.has_record = true;
  v.record_file = file;
  v.record_offset = offset;
  return v;
}

void NsIndexValue::add_counters(int64_t d_blocks, int64_t d_bytes) {
  blocks = uint64_t(std::max<int64_t>(0, int64_t(blocks) + d_blocks));
  bytes = uint64_t(std::max<int64_t>(0, int64_t(bytes) + d_bytes));
}

std::string ns_value_to_json(const NsIndexValue& v) {
  json j = v.descriptor.is_object() ? v.descriptor : json::object();
  j["blocks"] = v.blocks;
  j["bytes"] = v.bytes;
  if (v.has_record) j["record"] = {v.record_file, v.record_offset};
  json att = json::object();
  for (const auto& [name, a] : v.attachments) att[name] = {a.file, a.offset, a.length, a.checksum};
  j["attachments"] = std::move(att);
  return j.dump();
}

Status ns_value_from_json(std::string_view text, NsIndexValue* v) {
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::Corruption("namespace index value is not a JSON object");
  *v = NsIndexValue();
  if (!counter(j, "blocks", &v->blocks) || !counter(j, "bytes", &v->bytes))
    return Status::Corruption("namespace index value: \"blocks\" and \"bytes\" must be unsigned integers");
  if (const auto it = j.find("record"); it != j.end()) {
    uint64_t file = 0;
    if (!it->is_array() || it->size() != 2 || !unsigned_at(*it, 0, UINT32_MAX, &file) ||
        !unsigned_at(*it, 1, UINT64_MAX, &v->record_offset))
      return Status::Corruption("namespace index value: \"record\" is not [file_id, offset]");
    v->has_record = true;
    v->record_file = uint32_t(file);
  }
  if (const auto it = j.find("attachments"); it != j.end()) {
    if (!it->is_object()) return Status::Corruption("namespace index value: \"attachments\" is not an object");
    for (const auto& [name, a] : it->items()) {
      NsAttachmentRef r;
      uint64_t file = 0;
      if (!a.is_array() || a.size() != 4 || !unsigned_at(a, 0, UINT32_MAX, &file) ||
          !unsigned_at(a, 1, UINT64_MAX, &r.offset) || !unsigned_at(a, 2, UINT64_MAX, &r.length) ||
          !unsigned_at(a, 3, UINT64_MAX, &r.checksum))
        return Status::Corruption("attachment \"" + name + "\" entry is malformed in the index");
      r.file = uint32_t(file);
      v->attachments.emplace(name, r);
    }
  }
  for (const char* k : {"blocks", "bytes", "record", "attachments"}) j.erase(k);
  v->descriptor = std::move(j);
  return Status::OK();
}

}  // namespace ucm
