// ucm/format/sglang_pages.h: the SGLang page alias table of a namespace (store_v1.md §12.1): the
// payload of its NS_ATTACHMENT "sglang_pages.p<P>", which lists every full page of the namespace's
// registered documents with the block hashes that hold it. Pure format code: no RocksDB, no
// threads; thread-safe.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ucm/format/common.h"

namespace ucm::fmt {

inline constexpr uint32_t kSglangPagesVersion = 1;   ///< newest table version this code knows
inline constexpr size_t kSglangPagesHeaderSize = 64;
using SglangPageKey = std::array<uint8_t, 32>;       ///< SHA-256 page key, raw bytes

/// The attachment name of the table for page size `page_size`: "sglang_pages.p<page_size>".
std::string sglang_pages_name(uint32_t page_size);

/// One table (§12.1). entries: page_key || k block hashes, in `keys` / `blocks` (blocks[i*k + j]:
/// block j of page i). encode sorts by key; decode requires the sorted order.
struct SglangPages {
  uint32_t page_size = 0;    ///< P tokens
  uint32_t block_size = 0;   ///< T tokens (the namespace's); P % T == 0
  bool seeded = false;
  SglangPageKey seed{};      ///< zero unless seeded
  std::vector<SglangPageKey> keys;
  std::vector<BlockHash> blocks;  ///< keys.size() * (P / T)
  uint32_t blocks_per_page() const { return block_size ? page_size / block_size : 0; }
};

/// The payload bytes. InvalidArgument for sizes that break §12.1 (P % T, blocks.size()) or a
/// duplicate key; sorts a copy by key.
Status encode_sglang_pages(const SglangPages& t, std::string* out);
/// Corruption for a bad magic, size, order or checksum; NotSupported for a newer version.
Status decode_sglang_pages(const void* data, size_t len, SglangPages* out);

}  // namespace ucm::fmt
