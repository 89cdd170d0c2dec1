// lib/src/hash.cc: chained block hashes, md5-chain-v1 (store_v1.md §4.1).
#include "ucm/hash.h"

#include <openssl/evp.h>

#include <cstring>

#include "ucm/core/evp.h"

namespace ucm {

BlockHash root_hash(const NamespaceId& ns) {
  uint8_t buf[11 + 16];
  std::memcpy(buf, "ucm.hash.v1", 11);
  std::memcpy(buf + 11, ns.data(), 16);
  BlockHash out{};
  unsigned int n = 0;
  EVP_Digest(buf, sizeof buf, out.data(), &n, EVP_md5(), nullptr);
  return out;
}

size_t hash_blocks(const BlockHash& parent, const uint32_t* tokens, size_t n_tokens, uint32_t block_size,
                   std::vector<BlockHash>* out) {
  if (block_size == 0) return 0;
  const size_t nb = n_tokens / block_size;
  if (nb == 0) return 0;
  const core::EvpCtx ctx = core::new_evp_ctx();
  std::vector<uint8_t> buf(size_t(block_size) * 4);
  BlockHash prev = parent;
  out->reserve(out->size() + nb);
  for (size_t b = 0; b < nb; ++b) {
    const uint32_t* t = tokens + b * block_size;
    for (uint32_t i = 0; i < block_size; ++i) {  // u32 little-endian, independent of host order
      buf[4 * i] = uint8_t(t[i]);
      buf[4 * i + 1] = uint8_t(t[i] >> 8);
      buf[4 * i + 2] = uint8_t(t[i] >> 16);
      buf[4 * i + 3] = uint8_t(t[i] >> 24);
    }
    BlockHash h{};
    unsigned int n = 0;
    EVP_DigestInit_ex(ctx.get(), EVP_md5(), nullptr);
    EVP_DigestUpdate(ctx.get(), prev.data(), 16);
    EVP_DigestUpdate(ctx.get(), buf.data(), buf.size());
    EVP_DigestFinal_ex(ctx.get(), h.data(), &n);
    out->push_back(h);
    prev = h;
  }
  return nb;
}

}  // namespace ucm
