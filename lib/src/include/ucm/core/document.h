// ucm/core/document.h: the document registry value (store_v1.md §5.6), as JSON.
// Internal to libucm and lib/admin; not installed.
#pragma once
#include <functional>
#include <string>

#include "ucm/status.h"
#include "ucm/store.h"

namespace ucm {

/// {"id", "first_block", "last_block", "blocks", "tokens", "source", "created_ms"}; block hashes
/// as 32 lowercase hex digits. created_ms 0 becomes the current time.
std::string document_to_json(const DocumentEntry& doc);
/// The registry's rule (store_v1.md §5.6): `d` is complete when the walk from its last block
/// through the parents reaches its first block in exactly d.blocks steps over present blocks.
/// parent_of(h, &p) returns false when block h is absent, else sets p to its parent.
bool document_complete(const DocumentEntry& d, const std::function<bool(const BlockHash&, BlockHash*)>& parent_of);
/// The inverse of document_to_json. Corruption when the text is not such an object (id, first_block and last_block
/// are required; the counters default to 0).
Status document_from_json(const std::string& json, DocumentEntry* doc);

}  // namespace ucm
