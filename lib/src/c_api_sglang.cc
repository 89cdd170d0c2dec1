// lib/src/c_api_sglang.cc: SGLang's HiCache page keys in the C ABI (ucm/ucm.h:
// ucm_sglang_page_hashes, ucm_sglang_namespace_seed), over ucm/sglang_keys.h.
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ucm/core/c_api_internal.h"
#include "ucm/sglang_keys.h"
#include "ucm/ucm.h"

using namespace ucm::capi;

UCM_API int ucm_sglang_page_hashes(const uint8_t* prior, const uint32_t* tokens, size_t n_tokens, uint32_t page_size,
                                   uint8_t* out_hashes, size_t max_pages, size_t* n_pages) {
  return guarded("ucm_sglang_page_hashes", [&] {
    if (page_size == 0) return fail(UCM_E_INVALID, "ucm_sglang_page_hashes: page_size is 0");
    if (n_tokens && !tokens) return fail(UCM_E_INVALID, "ucm_sglang_page_hashes: tokens is NULL");
    const size_t np = n_tokens / page_size;
    if (n_pages) *n_pages = np;
    if (np > max_pages)
      return fail(UCM_E_INVALID, "ucm_sglang_page_hashes: " + std::to_string(np) + " full pages, out_hashes holds " +
                                     std::to_string(max_pages));
    if (np && !out_hashes) return fail(UCM_E_INVALID, "ucm_sglang_page_hashes: out_hashes is NULL");
    std::optional<ucm::SglangPageHash> p;
    if (prior) {
      p.emplace();
      std::memcpy(p->data(), prior, 32);
    }
    std::vector<ucm::SglangPageHash> hs;
    hs.reserve(np);
    ucm::sglang_page_hashes(p, tokens, np * page_size, page_size, &hs);
    if (!hs.empty()) std::memcpy(out_hashes, hs.data(), hs.size() * 32);
    return ok();
  });
}

UCM_API int ucm_sglang_namespace_seed(const char* extra_key, size_t extra_key_len, const char* cache_salt,
                                      size_t cache_salt_len, uint8_t* seed_out, int* has_seed) {
  return guarded("ucm_sglang_namespace_seed", [&] {
    if (!seed_out || !has_seed) return fail(UCM_E_INVALID, "ucm_sglang_namespace_seed: seed_out and has_seed must not be NULL");
    std::optional<std::string_view> ek, cs;
    if (extra_key) ek = std::string_view(extra_key, extra_key_len);
    if (cache_salt) cs = std::string_view(cache_salt, cache_salt_len);
    const auto seed = ucm::sglang_namespace_seed(ek, cs);
    *has_seed = seed ? 1 : 0;
    if (seed) std::memcpy(seed_out, seed->data(), 32);
    return ok();
  });
}
