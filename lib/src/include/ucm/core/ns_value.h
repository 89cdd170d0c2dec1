// ucm/core/ns_value.h: the value of the index's `namespaces` family (store_v1.md §5.2), as JSON:
// the namespace descriptor (§7) with the added fields "blocks", "bytes", "record" and
// "attachments". The one place those keys are read and written. Internal to libucm and
// lib/admin; not installed.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "ucm/namespace.h"
#include "ucm/status.h"

namespace ucm {

/// An NS_ATTACHMENT record as the index points at it: [file_id, offset, length, checksum], where
/// length and checksum are the record's payload_length and payload_checksum (§5.2).
struct NsAttachmentRef {
  uint32_t file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t checksum = 0;
};

struct NsIndexValue {
  /// The descriptor object (§7) without the four fields below; other keys are kept as they are.
  nlohmann::json descriptor = nlohmann::json::object();
  uint64_t blocks = 0;  ///< present blocks
  uint64_t bytes = 0;   ///< payload + repr bytes of the present blocks
  bool has_record = false;  ///< "record" present: [file_id, offset] of the NAMESPACE record
  uint32_t record_file = 0;
  uint64_t record_offset = 0;
  std::map<std::string, NsAttachmentRef> attachments;  ///< by name

  /// The value of a newly registered namespace: `desc_json` (NamespaceDesc::to_json()), zero
  /// counters, no attachments, its NAMESPACE record at (file, offset).
  static NsIndexValue Fresh(const std::string& desc_json, uint32_t file, uint64_t offset);
  /// Adds signed deltas to the counters; neither goes below 0.
  void add_counters(int64_t d_blocks, int64_t d_bytes);
};

/// The JSON text (keys sorted, as nlohmann::json writes objects).
std::string ns_value_to_json(const NsIndexValue& v);
/// The inverse. Corruption when the text is not a JSON object, or a field of §5.2 has the wrong
/// shape ("blocks"/"bytes" not unsigned integers, "record" not [file, offset], an attachment not
/// [file, offset, length, checksum] of unsigned integers, file ids over 32 bits).
Status ns_value_from_json(std::string_view json, NsIndexValue* v);

}  // namespace ucm
