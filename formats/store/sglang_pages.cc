// formats/store/sglang_pages.cc: the SGLang page alias table (store_v1.md §12.1).
#include "ucm/format/sglang_pages.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace ucm::fmt {
namespace {
constexpr char kSglangPagesMagic[8] = {'U', 'C', 'M', 'S', 'G', 'P', 'A', '\0'};
}

std::string sglang_pages_name(uint32_t page_size) { return "sglang_pages.p" + std::to_string(page_size); }

Status encode_sglang_pages(const SglangPages& t, std::string* out) {
  if (t.block_size == 0 || t.page_size < t.block_size || t.page_size % t.block_size)
    return Status::InvalidArgument("sglang pages: page size " + std::to_string(t.page_size) +
                                   " is not a multiple of the block size " + std::to_string(t.block_size));
  const size_t k = t.blocks_per_page(), n = t.keys.size();
  if (t.blocks.size() != n * k)
    return Status::InvalidArgument("sglang pages: " + std::to_string(t.blocks.size()) + " block hashes for " +
                                   std::to_string(n) + " pages of " + std::to_string(k) + " blocks");
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return t.keys[a] < t.keys[b]; });
  const size_t entry = 32 + 16 * k;
  out->assign(kSglangPagesHeaderSize + n * entry + 8, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out->data());
  std::memcpy(p, kSglangPagesMagic, 8);
  put_le32(p + 8, kSglangPagesVersion);
  put_le32(p + 12, t.page_size);
  put_le32(p + 16, t.block_size);
  put_le32(p + 20, t.seeded ? 1 : 0);
  if (t.seeded) std::memcpy(p + 24, t.seed.data(), 32);
  put_le64(p + 56, n);
  uint8_t* e = p + kSglangPagesHeaderSize;
  for (size_t r = 0; r < n; ++r, e += entry) {
    const size_t i = order[r];
    if (r && t.keys[i] == t.keys[order[r - 1]])
      return Status::InvalidArgument("sglang pages: page key listed twice");
    std::memcpy(e, t.keys[i].data(), 32);
    for (size_t j = 0; j < k; ++j) std::memcpy(e + 32 + 16 * j, t.blocks[i * k + j].data(), 16);
  }
  put_le64(e, xxh3(p, e - p));
  return Status::OK();
}

Status decode_sglang_pages(const void* data, size_t len, SglangPages* out) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (len < kSglangPagesHeaderSize + 8 || std::memcmp(p, kSglangPagesMagic, 8) != 0)
    return Status::Corruption("sglang pages: not a page alias table (magic or size)");
  const uint32_t version = get_le32(p + 8);
  if (version > kSglangPagesVersion)
    return Status::NotSupported("sglang pages: table version " + std::to_string(version) +
                                " is newer than this ucm reads (" + std::to_string(kSglangPagesVersion) + ")");
  if (version == 0) return Status::Corruption("sglang pages: version 0");
  SglangPages t;
  t.page_size = get_le32(p + 12);
  t.block_size = get_le32(p + 16);
  const uint32_t seeded = get_le32(p + 20);
  if (t.block_size == 0 || t.page_size < t.block_size || t.page_size % t.block_size || seeded > 1)
    return Status::Corruption("sglang pages: bad header (page size " + std::to_string(t.page_size) + ", block size " +
                              std::to_string(t.block_size) + ")");
  t.seeded = seeded == 1;
  std::memcpy(t.seed.data(), p + 24, 32);
  const uint64_t n = get_le64(p + 56);
  const size_t k = t.blocks_per_page(), entry = 32 + 16 * k;
  if (n > (len - kSglangPagesHeaderSize - 8) / entry || kSglangPagesHeaderSize + n * entry + 8 != len)
    return Status::Corruption("sglang pages: " + std::to_string(len) + " bytes do not hold " + std::to_string(n) +
                              " entries of " + std::to_string(entry) + " bytes");
  if (get_le64(p + len - 8) != xxh3(p, len - 8)) return Status::Corruption("sglang pages: checksum mismatch");
  t.keys.resize(n);
  t.blocks.resize(n * k);
  const uint8_t* e = p + kSglangPagesHeaderSize;
  for (size_t i = 0; i < n; ++i, e += entry) {
    std::memcpy(t.keys[i].data(), e, 32);
    if (i && !(t.keys[i - 1] < t.keys[i])) return Status::Corruption("sglang pages: entries not sorted by page key");
    for (size_t j = 0; j < k; ++j) std::memcpy(t.blocks[i * k + j].data(), e + 32 + 16 * j, 16);
  }
  *out = std::move(t);
  return Status::OK();
}

}  // namespace ucm::fmt
