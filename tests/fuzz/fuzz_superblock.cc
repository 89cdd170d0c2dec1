// Fuzz target: the store superblock (formats/store/records.h, store_v1.md §2).
// Input: the bytes of STORE/UCMSTORE.
// Contract checked:
//   decode_superblock  returns OK or Corruption only; OK needs >= 64 bytes; created_by is at most
//                      32 bytes; what it decodes re-encodes and decodes to the same fields.
//   read_superblock    (the same bytes as a store's UCMSTORE) returns OK, Corruption or Version
//                      only; OK means 1 <= format_version <= kFormatVersion; it agrees with
//                      decode_superblock on the first 64 bytes.
#include <sys/stat.h>

#include <cstring>
#include <vector>

#include "ucm/format/format.h"
#include "fuzz_common.h"

using namespace ucm;
using namespace ucm::fmt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Superblock sb;
  Status s = decode_superblock(data, size, "fuzz", &sb);
  FUZZ_CHECK_MSG(s.ok() || s.code() == Code::kCorruption, s.ToString());
  if (s.ok()) {
    FUZZ_CHECK(size >= kSuperblockSize);
    FUZZ_CHECK(sb.created_by.size() <= 32);
    uint8_t re[kSuperblockSize];
    encode_superblock(sb, re);
    Superblock sb2;
    FUZZ_CHECK(decode_superblock(re, sizeof re, "re-encoded", &sb2).ok());
    FUZZ_CHECK(sb2.format_version == sb.format_version && sb2.min_reader_version == sb.min_reader_version &&
               sb2.created_ms == sb.created_ms && sb2.created_by == sb.created_by);
  } else {
    FUZZ_CHECK(!s.message().empty());
  }

  // The same bytes as the superblock of a store directory.
  static const std::string store = [] {
    std::string d = ucm_fuzz::scratch_dir() + "/store";
    ::mkdir(d.c_str(), 0755);
    return d;
  }();
  ucm_fuzz::write_file(superblock_path(store), data, size);
  Superblock rb;
  Status r = read_superblock(store, &rb);
  FUZZ_CHECK_MSG(r.ok() || r.code() == Code::kCorruption || r.code() == Code::kVersion, r.ToString());
  if (r.ok()) {
    FUZZ_CHECK(s.ok());
    FUZZ_CHECK(rb.format_version >= 1 && rb.format_version <= kFormatVersion);
    FUZZ_CHECK(rb.created_ms == sb.created_ms && rb.created_by == sb.created_by);
  }
  if (!s.ok()) FUZZ_CHECK(!r.ok());
  return 0;
}
