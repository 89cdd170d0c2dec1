// formats/store/common.cc: checksums, byte order and MD5 (see ucm/format/common.h).
#include "ucm/format/common.h"

#include <openssl/evp.h>
#include <xxhash.h>

#include "ucm/clock.h"

namespace ucm::fmt {

uint64_t xxh3(const void* data, size_t len) { return XXH3_64bits(data, len); }

uint64_t now_ms() { return ucm::now_ms(); }  // ucm/clock.h: the one clock

void put_le16(uint8_t* p, uint16_t v) { for (int i = 0; i < 2; ++i) p[i] = uint8_t(v >> (8 * i)); }
void put_le32(uint8_t* p, uint32_t v) { for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i)); }
void put_le64(uint8_t* p, uint64_t v) { for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i)); }
uint16_t get_le16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t get_le32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
void put_be32(uint8_t* p, uint32_t v) { for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * (3 - i))); }
void put_be64(uint8_t* p, uint64_t v) { for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * (7 - i))); }
uint32_t get_be32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | p[i];
  return v;
}
uint64_t get_be64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

BlockHash md5(const void* data, size_t len) {
  BlockHash out{};
  unsigned int n = 0;
  EVP_Digest(data, len, out.data(), &n, EVP_md5(), nullptr);
  return out;
}

}  // namespace ucm::fmt
