// Fuzz target: the JSON values of the store index: namespace descriptors
// (ucm::NamespaceDesc::from_json, lib/cxx/include/ucm/namespace.h, store_v1.md §7) and document
// registry entries (ucm::document_from_json, lib/src/document.h, §5.6).
//
// Input: one selector byte (bit 0: 0 namespace, 1 document), then the JSON text.
// Contract checked:
//   NamespaceDesc::from_json  OK or InvalidArgument only, with a message; OK means validate()
//     passes, and to_json() reads back to the same canonical JSON (same id and hash seed).
//   document_from_json        OK or Corruption only, with a message; OK means id, first_block
//     and last_block were there; document_to_json() reads back to the same entry.
#include <string>
#include <string_view>

#include "fuzz_common.h"
#include "ucm/core/document.h"
#include "ucm/namespace.h"

using namespace ucm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string json(reinterpret_cast<const char*>(data + 1), size - 1);
  if ((data[0] & 1) == 0) {
    NamespaceDesc d;
    Status s = NamespaceDesc::from_json(json, &d);
    FUZZ_CHECK_MSG(s.ok() || s.code() == Code::kInvalidArgument, s.ToString());
    if (!s.ok()) {
      FUZZ_CHECK(!s.message().empty());
      return 0;
    }
    FUZZ_CHECK_MSG(d.validate().ok(), d.validate().ToString());
    const std::string canon = d.canonical_json();
    const NamespaceId id = d.id();
    const NamespaceId seed = d.hash_seed();
    const std::string name = d.display_name();
    FUZZ_CHECK(!name.empty());
    (void)d.payload_bytes();
    NamespaceDesc d2;
    Status s2 = NamespaceDesc::from_json(d.to_json(), &d2);
    FUZZ_CHECK_MSG(s2.ok(), s2.ToString());
    FUZZ_CHECK_MSG(d2.canonical_json() == canon, canon + " vs " + d2.canonical_json());
    FUZZ_CHECK(d2.id() == id && d2.hash_seed() == seed && d2.display_name() == name);
  } else {
    DocumentEntry doc;
    Status s = document_from_json(json, &doc);
    FUZZ_CHECK_MSG(s.ok() || s.code() == Code::kCorruption, s.ToString());
    if (!s.ok()) {
      FUZZ_CHECK(!s.message().empty());
      return 0;
    }
    if (doc.created_ms == 0) doc.created_ms = 1;  // 0 would become the current time
    DocumentEntry doc2;
    Status s2 = document_from_json(document_to_json(doc), &doc2);
    FUZZ_CHECK_MSG(s2.ok(), s2.ToString());
    FUZZ_CHECK(doc2.id == doc.id && doc2.first_block == doc.first_block && doc2.last_block == doc.last_block &&
               doc2.blocks == doc.blocks && doc2.tokens == doc.tokens && doc2.source == doc.source &&
               doc2.created_ms == doc.created_ms);
  }
  return 0;
}
