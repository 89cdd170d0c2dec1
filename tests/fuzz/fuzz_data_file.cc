// Fuzz target: data files (formats/store/records.h, store_v1.md §3): the file header, record
// headers and DataFileScanner over a whole file.
//
// Input: one flags byte, then the bytes of a data file (NNNNNNNN.ucmd).
//   flags bit 0: before parsing, make the checksums right (the file header's, and from the last
//                page to the first, the payload and header checksums of every page that starts
//                with the record magic "UCMR"), so that the fuzzer gets past the XXH3 checks and
//                reaches the field checks and the scanner's record walk.
// Contract checked:
//   decode_file_header / decode_record_header: OK, Corruption or Version (file header) only; a
//     decoded record header has version 1 and a known type.
//   DataFileScanner::Open: OK, Corruption or Version; OK means the size is the file's.
//   read_record (the index-directed read) of each valid record: OK with the record's own header as
//     the expectation, Corruption when the length, type or key expected is off.
//   DataFileScanner::next (with and without payload verification): terminates, never fails with
//     an I/O error on a readable file, returns records in increasing offset order that do not
//     overlap and lie inside the file (a valid record's header + payload inside it, a corrupt run
//     or torn tail inside it), verified payloads match their checksum; both passes see the same
//     records, except that a payload failing its checksum is kCorrupt in the verifying pass.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ucm/format/format.h"
#include "fuzz_common.h"

using namespace ucm;
using namespace ucm::fmt;

namespace {

void fix_checksums(std::vector<uint8_t>& f) {
  if (f.size() >= kPage) put_le64(f.data() + 4088, xxh3(f.data(), 4088));
  if (f.size() < 2 * kPage) return;
  for (size_t off = (f.size() / kPage - 1) * kPage; off >= kPage; off -= kPage) {
    uint8_t* p = f.data() + off;
    if (std::memcmp(p, "UCMR", 4) != 0) continue;
    const uint64_t len = get_le64(p + 64);
    if (len <= f.size() - off - kPage) put_le64(p + 72, xxh3(p + kPage, len));
    const uint32_t tc = get_le32(p + 80);  // token ids (store_v1.md §3.2, format 4)
    if ((get_le32(p + 12) & kRecordFlagTokens) && tc <= kMaxRecordTokens) put_le64(p + 96, xxh3(p + 128, 4 * size_t(tc)));
    put_le64(p + 120, xxh3(p, 120));
  }
}

struct Seen {
  uint64_t offset, length;
  ScannedRecord::State state;
  RecordHeader header;
};

// read_record (the index-directed read) of a record the scanner found valid: OK with the
// header's own expectations, Corruption (never anything else) when one of them is off.
void check_read_record(const std::string& path, const Seen& r, uint64_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  FUZZ_CHECK(fd >= 0);
  RecordExpect e;
  e.type = r.header.type;
  e.ns = r.header.ns;
  e.key = r.header.key;
  e.payload_length = r.header.payload_length;
  e.payload_checksum = r.header.payload_checksum;
  AlignedBuffer buf;
  Status s = read_record(fd, r.offset, e, &buf, "fuzz");
  FUZZ_CHECK_MSG(s.ok(), s.ToString());
  FUZZ_CHECK(xxh3(buf.data() + kPage, e.payload_length) == e.payload_checksum);
  const auto expect_corrupt = [&](const RecordExpect& bad) {
    Status b = read_record(fd, r.offset, bad, &buf, "fuzz");
    FUZZ_CHECK_MSG(b.code() == Code::kCorruption && !b.message().empty(), b.ToString());
  };
  RecordExpect longer = e;
  longer.payload_length = std::min<uint64_t>(e.payload_length + 1 + e.payload_length % 5000, size);
  if (longer.payload_length != e.payload_length) expect_corrupt(longer);
  RecordExpect other_type = e;
  other_type.type = e.type == RecordType::kBlockKV ? RecordType::kBlockRepr : RecordType::kBlockKV;
  expect_corrupt(other_type);
  RecordExpect other_key = e;
  other_key.key[0] ^= 1;
  expect_corrupt(other_key);
  other_key.check_ids = false;
  FUZZ_CHECK(read_record(fd, r.offset, other_key, &buf, "fuzz").ok());
  ::close(fd);
}

std::vector<Seen> scan(const std::string& path, uint64_t size, bool verify) {
  std::unique_ptr<DataFileScanner> sc;
  Status s = DataFileScanner::Open(path, &sc);
  FUZZ_CHECK_MSG(s.ok() || s.code() == Code::kCorruption || s.code() == Code::kVersion, s.ToString());
  std::vector<Seen> out;
  if (!s.ok()) {
    FUZZ_CHECK(!s.message().empty());
    return out;
  }
  FUZZ_CHECK(size >= kPage);
  FUZZ_CHECK(sc->file_size() == size);
  FUZZ_CHECK(sc->header().format_version <= kFormatVersion);
  uint64_t end = kPage;  // first byte after the previous record
  ScannedRecord rec;
  std::string payload;
  const size_t max_records = size / kPage + 1;
  while (sc->next(&rec, verify ? &payload : nullptr, verify)) {
    FUZZ_CHECK_MSG(out.size() < max_records, "scanner does not advance");
    FUZZ_CHECK(rec.offset >= end);
    FUZZ_CHECK(rec.offset % kPage == 0);
    FUZZ_CHECK(rec.length > 0);
    switch (rec.state) {
      case ScannedRecord::State::kValid:
        FUZZ_CHECK(rec.header_ok);
        FUZZ_CHECK(rec.header.record_version == 1);
        FUZZ_CHECK(uint16_t(rec.header.type) >= 1 && uint16_t(rec.header.type) <= 5);
        FUZZ_CHECK(rec.header.payload_length <= size && rec.offset + kPage + rec.header.payload_length <= size);
        FUZZ_CHECK(rec.length == record_size(rec.header.payload_length));
        if (verify) {
          FUZZ_CHECK(payload.size() == rec.header.payload_length);
          FUZZ_CHECK(xxh3(payload.data(), payload.size()) == rec.header.payload_checksum);
        }
        break;
      case ScannedRecord::State::kCorrupt:
      case ScannedRecord::State::kTornTail:
        FUZZ_CHECK(!rec.error.empty());
        if (rec.state == ScannedRecord::State::kCorrupt && rec.header_ok) {
          // A record whose payload failed its checksum: header and payload inside the file; its
          // length is the record's on-disk size (the last record's padding may lie past EOF).
          FUZZ_CHECK(verify);
          FUZZ_CHECK(rec.offset + kPage + rec.header.payload_length <= size);
          FUZZ_CHECK(rec.length == record_size(rec.header.payload_length));
        } else {
          FUZZ_CHECK(rec.offset + rec.length <= size);
        }
        break;
    }
    out.push_back({rec.offset, rec.length, rec.state, rec.header});
    end = std::min<uint64_t>(rec.offset + rec.length, size);
    if (rec.state == ScannedRecord::State::kTornTail) FUZZ_CHECK(end == size);
  }
  FUZZ_CHECK_MSG(sc->status().ok(), sc->status().ToString());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  std::vector<uint8_t> file(data + 1, data + size);
  if (flags & 1) fix_checksums(file);

  // Header decoders on a page-sized copy of each of the first pages (zero padded).
  const size_t pages = std::min<size_t>(8, (file.size() + kPage - 1) / kPage);
  std::vector<uint8_t> page(kPage);
  for (size_t i = 0; i < std::max<size_t>(pages, 1); ++i) {
    std::fill(page.begin(), page.end(), 0);
    if (i * kPage < file.size())
      std::memcpy(page.data(), file.data() + i * kPage, std::min(kPage, file.size() - i * kPage));
    if (i == 0) {
      FileHeader fh;
      Status s = decode_file_header(page.data(), "fuzz", &fh);
      FUZZ_CHECK_MSG(s.ok() || s.code() == Code::kCorruption || s.code() == Code::kVersion, s.ToString());
      if (s.ok()) {
        std::vector<uint8_t> re(kPage);
        encode_file_header(fh, re.data());
        FileHeader fh2;
        FUZZ_CHECK(decode_file_header(re.data(), "re", &fh2).ok());
        FUZZ_CHECK(fh2.file_id == fh.file_id && fh2.created_ms == fh.created_ms &&
                   fh2.format_version == fh.format_version);
      }
    }
    RecordHeader rh;
    Status s = decode_record_header(page.data(), "fuzz", &rh);
    FUZZ_CHECK_MSG(s.ok() || s.code() == Code::kCorruption, s.ToString());
    if (s.ok()) {
      FUZZ_CHECK(rh.record_version == 1);
      FUZZ_CHECK(uint16_t(rh.type) >= 1 && uint16_t(rh.type) <= 5);
      FUZZ_CHECK(std::strcmp(record_type_name(rh.type), "UNKNOWN") != 0);
      std::vector<uint8_t> re(kPage);
      const std::vector<uint32_t> ids = record_tokens(page.data(), rh);  // re-encoded with its ids
      FUZZ_CHECK(ids.empty() ? !(rh.flags & kRecordFlagTokens) : ids.size() == rh.token_count);
      RecordHeader enc = rh;
      enc.tokens = ids.empty() ? nullptr : ids.data();
      encode_record_header(enc, re.data());
      RecordHeader rh2;
      FUZZ_CHECK(decode_record_header(re.data(), "re", &rh2).ok());
      FUZZ_CHECK(rh2.payload_length == rh.payload_length && rh2.payload_checksum == rh.payload_checksum &&
                 rh2.flags == rh.flags && rh2.ns == rh.ns && rh2.key == rh.key && rh2.token_count == rh.token_count);
      FUZZ_CHECK(record_tokens(re.data(), rh2) == ids);
    }
  }

  // The scanner over the whole file, with and without payload verification.
  static const std::string path = ucm_fuzz::scratch_dir() + "/00000001.ucmd";
  ucm_fuzz::write_file(path, file.data(), file.size());
  const std::vector<Seen> verified = scan(path, file.size(), true);
  const std::vector<Seen> headers = scan(path, file.size(), false);
  // Without verification the scanner walks the same record chain: a payload that fails its
  // checksum is skipped by the record's length, as the header-only pass skips it.
  for (const Seen& r : verified)
    if (r.state == ScannedRecord::State::kValid) check_read_record(path, r, file.size());
  FUZZ_CHECK(verified.size() == headers.size());
  for (size_t i = 0; i < verified.size(); ++i) {
    FUZZ_CHECK(verified[i].offset == headers[i].offset && verified[i].length == headers[i].length);
    if (verified[i].state != headers[i].state) {
      FUZZ_CHECK(verified[i].state == ScannedRecord::State::kCorrupt &&
                 headers[i].state == ScannedRecord::State::kValid);
    }
  }
  return 0;
}
