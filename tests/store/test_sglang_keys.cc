// SGLang's HiCache page keys through the C ABI (ucm_sglang_page_hashes, ucm_sglang_namespace_seed),
// linking libucm.so only. Known answers: SGLang 0.5.23's own get_hash_str / storage_namespace_seed
// run in .venv-sglang (scripts/venv_sglang.sh; docs/sglang_0.5.23_hicache_facts.md §3), and the
// first from SGLang's CPU test of the hash (tokens [1, 2, 3, 4] as one page).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "ucm/ucm.h"

namespace {

std::string hex(const uint8_t* p, size_t n = 32) {
  std::string s;
  char b[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof b, "%02x", p[i]);
    s += b;
  }
  return s;
}

std::vector<std::string> keys(const uint8_t* prior, const std::vector<uint32_t>& t, uint32_t page) {
  std::vector<uint8_t> out(32 * (t.size() / page + 1));
  size_t n = 0;
  EXPECT_EQ(ucm_sglang_page_hashes(prior, t.data(), t.size(), page, out.data(), t.size() / page, &n), UCM_OK)
      << ucm_last_error();
  std::vector<std::string> v;
  for (size_t i = 0; i < n; ++i) v.push_back(hex(out.data() + 32 * i));
  return v;
}

std::string seeded_page0(const char* ek, const char* cs) {
  uint8_t seed[32];
  int has = -1;
  EXPECT_EQ(ucm_sglang_namespace_seed(ek, ek ? std::string(ek).size() : 0, cs, cs ? std::string(cs).size() : 0, seed,
                                      &has),
            UCM_OK);
  EXPECT_EQ(has, 1);
  return keys(seed, {1, 2, 3, 4}, 4).at(0);
}

}  // namespace

TEST(SglangKeys, KnownAnswersOfSglangItself) {
  EXPECT_EQ(keys(nullptr, {1, 2, 3, 4}, 4),
            std::vector<std::string>{"cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72"});
  EXPECT_EQ(keys(nullptr, {1, 2, 3, 4, 5, 6, 7, 8}, 4),
            (std::vector<std::string>{"cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72",
                                      "4ebfa8a1f3c341517621838c6e1b9aa350307e3f00b3cbd1a07ef740f54396d6"}));
  // Seeded chains (a LoRA request's extra_key, a cache_salt).
  EXPECT_EQ(seeded_page0("lora-a", nullptr), "e4f68dc4af99b6de199d5a048add282da40aa4ef97942ce9eca321bccada9376");
  EXPECT_EQ(seeded_page0(nullptr, "salt"), "afce9928b3a79318e14ae395d0bad645729b88568513d9f09d07f74973e0b7dd");
  // The empty string is not None.
  const std::string empty = seeded_page0("", nullptr);
  EXPECT_EQ(empty.substr(0, 8), "f4f1cc11");
  EXPECT_EQ(empty.substr(56), "e2b18637");
}

TEST(SglangKeys, ChainsContinueFromAPriorAndOnlyFullPagesCount) {
  std::vector<uint32_t> t(300);
  for (size_t i = 0; i < t.size(); ++i) t[i] = uint32_t(i * 2654435761u);
  const auto all = keys(nullptr, t, 64);
  ASSERT_EQ(all.size(), 4u);  // 300 / 64: the partial last page has no key
  // Continuing from page 1's key gives pages 2 and 3.
  uint8_t prior[32];
  for (int i = 0; i < 32; ++i) prior[i] = uint8_t(std::stoi(all[1].substr(2 * i, 2), nullptr, 16));
  const std::vector<uint32_t> rest(t.begin() + 128, t.end());
  EXPECT_EQ(keys(prior, rest, 64), (std::vector<std::string>{all[2], all[3]}));
  // Page size changes every key after... every key: a 128-token page is not two 64-token pages.
  EXPECT_NE(keys(nullptr, t, 128).at(0), all[0]);
}

TEST(SglangKeys, BadArgumentsAreInvalidAndSized) {
  uint32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint8_t out[64];
  size_t n = 0;
  EXPECT_EQ(ucm_sglang_page_hashes(nullptr, t, 8, 0, out, 2, &n), UCM_E_INVALID);
  EXPECT_EQ(ucm_sglang_page_hashes(nullptr, nullptr, 8, 4, out, 2, &n), UCM_E_INVALID);
  EXPECT_EQ(ucm_sglang_page_hashes(nullptr, t, 8, 4, out, 1, &n), UCM_E_INVALID);
  EXPECT_EQ(n, 2u);  // the size needed
  EXPECT_EQ(ucm_sglang_page_hashes(nullptr, t, 8, 4, nullptr, 2, &n), UCM_E_INVALID);
  EXPECT_EQ(ucm_sglang_page_hashes(nullptr, t, 3, 4, nullptr, 0, &n), UCM_OK);  // no full page
  EXPECT_EQ(n, 0u);
  int has = 7;
  uint8_t seed[32] = {0};
  EXPECT_EQ(ucm_sglang_namespace_seed(nullptr, 0, nullptr, 0, seed, &has), UCM_OK);
  EXPECT_EQ(has, 0);  // no seed: the chain has no prior
  EXPECT_EQ(ucm_sglang_namespace_seed("a", 1, nullptr, 0, nullptr, &has), UCM_E_INVALID);
}
