// lib/src/sglang_keys.cc: SGLang's HiCache page keys (ucm/sglang_keys.h).
#include "ucm/sglang_keys.h"

#include <openssl/evp.h>

#include "ucm/core/evp.h"

namespace ucm {

namespace {
void put_le(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = uint8_t(v >> (8 * i));
}
}  // namespace

size_t sglang_page_hashes(const std::optional<SglangPageHash>& prior, const uint32_t* tokens, size_t n_tokens,
                          uint32_t page_size, std::vector<SglangPageHash>* out) {
  if (page_size == 0) return 0;
  const size_t pages = n_tokens / page_size;
  const core::EvpCtx ctx = core::new_evp_ctx();
  std::vector<uint8_t> buf(size_t(page_size) * 4);
  std::optional<SglangPageHash> prev = prior;
  for (size_t i = 0; i < pages; ++i) {
    for (uint32_t t = 0; t < page_size; ++t) put_le(buf.data() + 4 * size_t(t), tokens[i * page_size + t], 4);
    SglangPageHash h;
    unsigned int n = 0;
    EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
    if (prev) EVP_DigestUpdate(ctx.get(), prev->data(), prev->size());
    EVP_DigestUpdate(ctx.get(), buf.data(), buf.size());
    EVP_DigestFinal_ex(ctx.get(), h.data(), &n);
    out->push_back(h);
    prev = h;
  }
  return pages;
}

std::optional<SglangPageHash> sglang_namespace_seed(std::optional<std::string_view> extra_key,
                                                    std::optional<std::string_view> cache_salt) {
  if (!extra_key && !cache_salt) return std::nullopt;
  const core::EvpCtx ctx = core::new_evp_ctx();
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  static constexpr char kTag[] = "sglang-cache-namespace-v1";
  EVP_DigestUpdate(ctx.get(), kTag, sizeof kTag - 1);
  for (const auto& part : {extra_key, cache_salt}) {
    if (!part) {
      const uint8_t none = 0;
      EVP_DigestUpdate(ctx.get(), &none, 1);
      continue;
    }
    uint8_t head[9];
    head[0] = 1;
    put_le(head + 1, part->size(), 8);
    EVP_DigestUpdate(ctx.get(), head, sizeof head);
    EVP_DigestUpdate(ctx.get(), part->data(), part->size());
  }
  SglangPageHash h;
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx.get(), h.data(), &n);
  return h;
}

}  // namespace ucm
