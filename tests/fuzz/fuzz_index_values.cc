// Fuzz target: the binary index values and keys of the store (formats/store/records.h,
// store_v1.md §3.3, §5, §6).
//
// Input: one selector byte (modulo 7), then the value:
//   0 BlockRecord (§5.3)         decode_block_record
//   1 FileRecord (§5.4)          decode_file_record
//   2 journal entry (§5.5)       decode_journal_entry
//   3 access log record (§6)     decode_access_record (when >= 40 bytes)
//   4 NS_ATTACHMENT payload, flags kRecordFlagNamed (§3.3)   decode_attachment_payload
//   5 NS_ATTACHMENT payload, flags 0 (records of older writers)
//   6 keys: parse_block_key, parse_file_key, parse_journal_key, parse_data_file_name
// Contract checked: OK or Corruption only, with a message; OK exactly when the size (and the
// version / state / op field) is right; what decodes re-encodes to the same bytes (the
// attachment payload: to the same name and data); keys parse back to what they encode from.
#include <cstring>
#include <string>
#include <string_view>

#include "ucm/format/format.h"
#include "fuzz_common.h"

using namespace ucm;
using namespace ucm::fmt;

namespace {

void check_status(const Status& s) {
  FUZZ_CHECK_MSG(s.ok() || s.code() == Code::kCorruption, s.ToString());
  if (!s.ok()) FUZZ_CHECK(!s.message().empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int sel = data[0] % 7;
  const uint8_t* p = data + 1;
  const size_t n = size - 1;
  const std::string_view v(reinterpret_cast<const char*>(p), n);
  switch (sel) {
    case 0: {
      BlockRecord r;
      Status s = decode_block_record(v, &r);
      check_status(s);
      FUZZ_CHECK(s.ok() == (n == kBlockRecordSize && get_le16(p) == 1));
      if (s.ok()) {
        FUZZ_CHECK(encode_block_record(r) == v);
        (void)r.bytes();
      }
      break;
    }
    case 1: {
      FileRecord r;
      Status s = decode_file_record(v, &r);
      check_status(s);
      FUZZ_CHECK(s.ok() == (n == kFileRecordSize && get_le32(p + 16) <= 2));
      if (s.ok()) {
        FUZZ_CHECK(encode_file_record(r) == v);
        const uint64_t dead = file_dead_bytes(r.size, r.live_bytes, r.state);
        FUZZ_CHECK(dead <= r.size);
      }
      break;
    }
    case 2: {
      JournalEntry e;
      Status s = decode_journal_entry(v, &e);
      check_status(s);
      FUZZ_CHECK(s.ok() == (n == kJournalEntrySize && (p[0] == 1 || p[0] == 2)));
      if (s.ok()) FUZZ_CHECK(encode_journal_entry(e) == v);
      break;
    }
    case 3: {
      if (n < kAccessRecordSize) break;  // the caller reads whole 40-byte records only
      const AccessRecord r = decode_access_record(p);
      uint8_t re[kAccessRecordSize];
      encode_access_record(r, re);
      FUZZ_CHECK(std::memcmp(re, p, kAccessRecordSize) == 0);
      break;
    }
    case 4:
    case 5: {
      const uint32_t flags = sel == 4 ? kRecordFlagNamed : 0;
      std::string name;
      size_t off = 12345;
      Status s = decode_attachment_payload(flags, p, n, "fuzz", &name, &off);
      check_status(s);
      if (!s.ok()) break;
      FUZZ_CHECK(off <= n);
      if (flags == 0) {
        FUZZ_CHECK(off == 0 && name.empty());
        break;
      }
      FUZZ_CHECK(off % 8 == 0 && 4 + name.size() <= off);
      const std::string re = encode_attachment_payload(name, p + off, n - off);
      FUZZ_CHECK(re.size() == n);
      std::string name2;
      size_t off2 = 0;
      FUZZ_CHECK(decode_attachment_payload(flags, reinterpret_cast<const uint8_t*>(re.data()), re.size(), "re",
                                           &name2, &off2)
                     .ok());
      FUZZ_CHECK(name2 == name && off2 == off);
      FUZZ_CHECK(std::memcmp(re.data() + off, p + off, n - off) == 0);
      break;
    }
    case 6: {
      NamespaceId ns{};
      BlockHash h{};
      if (parse_block_key(v, &ns, &h)) {
        FUZZ_CHECK(block_key(ns, h) == v);
      } else {
        FUZZ_CHECK(n != 32);
      }
      const uint32_t fid = parse_file_key(v);
      if (n == 4) FUZZ_CHECK(file_key(fid) == v);
      const uint64_t seq = parse_journal_key(v);
      if (n == 8) FUZZ_CHECK(journal_key(seq) == v);
      uint32_t id = 0;
      if (parse_data_file_name(v, &id)) {
        const std::string path = data_file_path("S", id);
        FUZZ_CHECK(path.size() >= v.size() && path.compare(path.size() - v.size(), v.size(), v) == 0);
      }
      break;
    }
  }
  return 0;
}
