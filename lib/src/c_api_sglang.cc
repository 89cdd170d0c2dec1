// lib/src/c_api_sglang.cc: SGLang's HiCache page keys in the C ABI (ucm/ucm.h:
// ucm_sglang_page_hashes, ucm_sglang_namespace_seed), over ucm/sglang_keys.h; the page aliases
// (ucm_sglang_pages_*), over ucm/sglang_pages.h.
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ucm/core/c_api_internal.h"
#include "ucm/sglang_keys.h"
#include "ucm/sglang_pages.h"
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

struct ucm_sglang_pages {
  ucm_store_t* store;
  ucm::NamespaceId ns;
  std::unique_ptr<ucm::SglangPageIndex> index;
};

UCM_API int ucm_sglang_pages_open(ucm_store_t* store, const uint8_t* ns, uint32_t page_size, ucm_sglang_pages_t** out) {
  return guarded("ucm_sglang_pages_open", [&] {
    if (!store || !ns || !out) return fail(UCM_E_INVALID, "ucm_sglang_pages_open: store, ns and out must not be NULL");
    *out = nullptr;
    if (page_size == 0) return fail(UCM_E_INVALID, "ucm_sglang_pages_open: page_size is 0");
    std::unique_ptr<ucm::SglangPageIndex> idx;
    ucm::Status s = ucm::SglangPageIndex::Open(store->s.get(), ns_of(ns), page_size, &idx);
    if (!s.ok()) return fail(s);
    *out = new ucm_sglang_pages{store, ns_of(ns), std::move(idx)};
    return ok();
  });
}

UCM_API void ucm_sglang_pages_close(ucm_sglang_pages_t* pages) { delete pages; }

UCM_API int ucm_sglang_pages_info(ucm_sglang_pages_t* pages, uint32_t* blocks_per_page, uint64_t* n_pages) {
  return guarded("ucm_sglang_pages_info", [&] {
    if (!pages) return fail(UCM_E_INVALID, "ucm_sglang_pages_info: pages is NULL");
    if (blocks_per_page) *blocks_per_page = pages->index->blocks_per_page();
    if (n_pages) *n_pages = pages->index->pages();
    return ok();
  });
}

UCM_API int ucm_sglang_pages_lookup(ucm_sglang_pages_t* pages, const uint8_t* keys, size_t n, uint8_t* blocks_out,
                                    uint8_t* present, size_t* prefix_pages) {
  return guarded("ucm_sglang_pages_lookup", [&] {
    if (!pages || (n && !keys)) return fail(UCM_E_INVALID, "ucm_sglang_pages_lookup: pages and keys must not be NULL");
    (void)pages->index->maybe_reload(std::chrono::seconds(5));  // a failed reload keeps the table
    const size_t k = pages->index->blocks_per_page();
    std::vector<ucm::SglangPageHash> ks(n);
    if (n) std::memcpy(ks.data(), keys, n * 32);
    std::vector<uint8_t> found(n);
    std::vector<ucm::BlockHash> blocks(n * k);
    pages->index->resolve(ks.data(), n, blocks.data(), found.data());
    // Only listed pages' blocks are looked up; a page is present when all k of them are.
    std::vector<ucm::BlockHash> ask;
    ask.reserve(n * k);
    for (size_t i = 0; i < n; ++i)
      if (found[i]) ask.insert(ask.end(), blocks.begin() + i * k, blocks.begin() + (i + 1) * k);
    std::vector<uint8_t> have(ask.size());
    if (!ask.empty()) {
      ucm::Status s = pages->store->s->lookup(pages->ns, ask.data(), ask.size(), have.data(), nullptr);
      if (!s.ok()) return fail(s);
    }
    size_t prefix = 0, j = 0;
    bool in_prefix = true;
    for (size_t i = 0; i < n; ++i) {
      bool p = false;
      if (found[i]) {
        p = true;
        for (size_t b = 0; b < k; ++b) p = p && have[j + b];
        j += k;
        if (blocks_out) std::memcpy(blocks_out + i * k * 16, blocks.data() + i * k, k * 16);
      }
      if (present) present[i] = p ? 1 : 0;
      if (in_prefix && p) ++prefix;
      else in_prefix = false;
    }
    if (prefix_pages) *prefix_pages = prefix;
    return ok();
  });
}
