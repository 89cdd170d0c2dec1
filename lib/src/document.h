// lib/src/document.h: the document registry value (store_v1.md §5.6), as JSON.
// Internal to libucm and lib/admin; not installed.
#pragma once
#include <string>

#include "ucm/status.h"
#include "ucm/store.h"

namespace ucm {

/// {"id", "first_block", "last_block", "blocks", "tokens", "source", "created_ms"}; block hashes
/// as 32 lowercase hex digits. created_ms 0 becomes the current time.
std::string document_to_json(const DocumentEntry& doc);
/// The inverse. Corruption when the text is not such an object (id, first_block and last_block
/// are required; the counters default to 0).
Status document_from_json(const std::string& json, DocumentEntry* doc);

}  // namespace ucm
