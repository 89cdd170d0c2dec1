// ucm/sglang_keys.h: SGLang's HiCache storage page keys, computed once here for every ucm caller
// (the C ABI ucm_sglang_page_hashes / ucm_sglang_namespace_seed, the ucm.sglang backend, the
// admin tools). Source, read in sglang 0.5.23 (docs/sglang_0.5.23_hicache_facts.md §3):
//   sglang/srt/mem_cache/utils.py get_hash_str, storage_namespace_seed;
//   sglang/srt/mem_cache/cpp_utils/hash_binding.cpp hash_page.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace ucm {

/// A SHA-256 digest: one SGLang page key (SGLang passes it to a backend as 64 lower-case hex).
using SglangPageHash = std::array<uint8_t, 32>;

/// Keys of the floor(n_tokens / page_size) full pages of tokens[n_tokens] (u32 ids):
/// key_i = SHA256(key_{i-1} || page i's ids as u32 little-endian), key_{-1} = `prior` (32 raw
/// bytes; none: the first page hashes its ids alone). SGLang hashes ids above 2^32-1 otherwise;
/// u32 ids never are. Appends to `out`; returns the count. page_size 0 appends nothing.
size_t sglang_page_hashes(const std::optional<SglangPageHash>& prior, const uint32_t* tokens, size_t n_tokens,
                          uint32_t page_size, std::vector<SglangPageHash>* out);

/// The prior of a chain that starts at the root for a request with these extra_key / cache_salt
/// (std::nullopt: None in SGLang): SHA256("sglang-cache-namespace-v1" || for each of the two:
/// 0x00 when None, else 0x01 || u64 LE byte length || UTF-8 bytes). Both None: no prior.
std::optional<SglangPageHash> sglang_namespace_seed(std::optional<std::string_view> extra_key,
                                                    std::optional<std::string_view> cache_salt);

}  // namespace ucm
