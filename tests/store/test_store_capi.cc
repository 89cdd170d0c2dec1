// The C ABI (ucm/ucm.h) through libucm.so only: open/create, namespace, hash, dump, lookup,
// load (contiguous and paged, head ranges), errors, metrics.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ucm/ucm.h"

namespace fs = std::filesystem;

namespace {
const char* kDesc =
    R"({"model_id":"capi-model","weights_digest":"ab","dtype":"fp16","block_size":4,"num_layers":2,)"
    R"("num_kv_heads":2,"head_dim":4,"name":"capi"})";
constexpr size_t L = 2, T = 4, H = 2, D = 4, S = 2, kPayload = L * 2 * T * H * D * S;  // 256 bytes

std::vector<uint8_t> payload(size_t i) {
  std::vector<uint8_t> v(kPayload);
  for (size_t j = 0; j < kPayload; ++j) v[j] = uint8_t(i * 37 + j * 7 + 1);
  return v;
}
}  // namespace

TEST(CApi, RoundTrip) {
  const std::string p = (fs::temp_directory_path() / ("ucm_capi_" + std::to_string(::getpid()))).string();
  fs::remove_all(p);
  EXPECT_STREQ(ucm_version(), "0.1.0");
  EXPECT_EQ(ucm_format_version(), 1u);
  EXPECT_STREQ(ucm_strerror(UCM_E_CORRUPTION), "UCM_E_CORRUPTION");

  ucm_store_t* st = nullptr;
  EXPECT_EQ(ucm_store_open(p.c_str(), UCM_OPEN_READ_ONLY, &st), UCM_E_INVALID);
  EXPECT_NE(std::string(ucm_last_error()).find(p), std::string::npos) << ucm_last_error();
  ASSERT_EQ(ucm_store_open(p.c_str(), UCM_OPEN_CREATE, &st), UCM_OK) << ucm_last_error();
  ucm_store_t* st2 = nullptr;
  EXPECT_EQ(ucm_store_open(p.c_str(), UCM_OPEN_READ_WRITE, &st2), UCM_E_BUSY);
  EXPECT_NE(std::string(ucm_last_error()).find("locked by pid " + std::to_string(::getpid())), std::string::npos);

  uint8_t ns[16];
  ASSERT_EQ(ucm_store_namespace_register(st, kDesc, ns), UCM_OK) << ucm_last_error();
  EXPECT_EQ(ucm_store_namespace_register(st, "{not json", ns), UCM_E_INVALID);

  std::vector<uint32_t> toks(4 * 5 + 3);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = uint32_t(i * 13);
  std::vector<uint8_t> hashes(16 * 5);
  size_t nb = 0;
  EXPECT_EQ(ucm_hash_blocks(ns, nullptr, toks.data(), toks.size(), 4, hashes.data(), 2, &nb), UCM_E_INVALID);
  EXPECT_EQ(nb, 5u);
  ASSERT_EQ(ucm_hash_blocks(ns, nullptr, toks.data(), toks.size(), 4, hashes.data(), 5, &nb), UCM_OK);
  // Chaining from block 2's hash gives blocks 3..5.
  std::vector<uint8_t> tail(16 * 3);
  ASSERT_EQ(ucm_hash_blocks(ns, &hashes[16], toks.data() + 8, 12, 4, tail.data(), 3, &nb), UCM_OK);
  EXPECT_EQ(0, std::memcmp(tail.data(), &hashes[32], 48));

  std::vector<std::vector<uint8_t>> pl;
  std::vector<const void*> kv;
  std::vector<uint8_t> parents(16 * 4);
  for (size_t i = 0; i < 4; ++i) {
    pl.push_back(payload(i));
    kv.push_back(pl.back().data());
    if (i) std::memcpy(&parents[16 * i], &hashes[16 * (i - 1)], 16);
  }
  ucm_task_t* task = nullptr;
  ASSERT_EQ(ucm_store_dump(st, ns, hashes.data(), parents.data(), 4, kv.data(), &task), UCM_OK) << ucm_last_error();
  ASSERT_EQ(ucm_task_wait(task, -1), UCM_OK) << ucm_last_error();
  EXPECT_EQ(ucm_task_check(task), 1);
  EXPECT_EQ(ucm_task_block_status(task, 3), UCM_OK);
  ucm_task_free(task);

  // Reader handle in the same process.
  ucm_store_t* ro = nullptr;
  ASSERT_EQ(ucm_store_open(p.c_str(), UCM_OPEN_READ_ONLY, &ro), UCM_OK) << ucm_last_error();
  uint8_t found[16];
  char desc[512];
  size_t dlen = 0;
  ASSERT_EQ(ucm_store_namespace_find(ro, "capi", found, desc, sizeof desc, &dlen), UCM_OK) << ucm_last_error();
  EXPECT_EQ(0, std::memcmp(found, ns, 16));
  EXPECT_EQ(std::strlen(desc), dlen);
  EXPECT_EQ(ucm_store_namespace_find(ro, "capi", found, desc, 4, &dlen), UCM_E_INVALID);
  uint8_t present[5];
  size_t prefix = 0;
  ASSERT_EQ(ucm_store_lookup(ro, ns, hashes.data(), 5, present, &prefix), UCM_OK);
  EXPECT_EQ(prefix, 4u);
  EXPECT_EQ(present[4], 0);

  // Paged load of heads [1,2).
  std::vector<std::vector<uint8_t>> pages(4 * L * 2, std::vector<uint8_t>(T * 1 * D * S, 0));
  std::vector<void*> ptrs;
  for (auto& v : pages) ptrs.push_back(v.data());
  ASSERT_EQ(ucm_store_load(ro, ns, hashes.data(), 4, UCM_DEST_PAGED, ptrs.data(), 1, 2, &task), UCM_OK) << ucm_last_error();
  ASSERT_EQ(ucm_task_wait(task, 5000), UCM_OK) << ucm_last_error();
  ucm_task_free(task);
  for (size_t i = 0; i < 4; ++i)
    for (size_t l = 0; l < L; ++l)
      for (size_t k = 0; k < 2; ++k)
        for (size_t t = 0; t < T; ++t) {
          const uint8_t* want = pl[i].data() + ((((l * 2 + k) * T + t) * H + 1) * D) * S;
          const uint8_t* got = pages[(i * L + l) * 2 + k].data() + t * D * S;
          ASSERT_EQ(0, std::memcmp(want, got, D * S)) << i << " " << l << " " << k << " " << t;
        }
  // Contiguous load with a miss: per-block status.
  std::vector<std::vector<uint8_t>> dst(2, std::vector<uint8_t>(kPayload, 0xEE));
  void* dptr[2] = {dst[0].data(), dst[1].data()};
  std::vector<uint8_t> two(32);
  std::memcpy(two.data(), &hashes[16 * 3], 16);
  std::memcpy(two.data() + 16, &hashes[16 * 4], 16);
  ASSERT_EQ(ucm_store_load(ro, ns, two.data(), 2, UCM_DEST_CONTIGUOUS, dptr, 0, 0, &task), UCM_OK);
  EXPECT_EQ(ucm_task_wait(task, -1), UCM_E_NOT_FOUND);
  EXPECT_EQ(ucm_task_block_status(task, 0), UCM_OK);
  EXPECT_EQ(ucm_task_block_status(task, 1), UCM_E_NOT_FOUND);
  EXPECT_EQ(ucm_task_block_status(task, 2), UCM_E_INVALID);
  ucm_task_free(task);
  EXPECT_EQ(dst[0], pl[3]);
  EXPECT_EQ(dst[1], std::vector<uint8_t>(kPayload, 0xEE));
  // Bad head range is refused up front.
  EXPECT_EQ(ucm_store_load(ro, ns, two.data(), 1, UCM_DEST_CONTIGUOUS, dptr, 1, 3, &task), UCM_E_INVALID);
  EXPECT_NE(std::string(ucm_last_error()).find("KV-head range"), std::string::npos) << ucm_last_error();

  size_t mlen = 0;
  EXPECT_EQ(ucm_store_metrics(ro, nullptr, 0, &mlen), UCM_E_INVALID);
  std::string m(mlen + 1, '\0');
  ASSERT_EQ(ucm_store_metrics(ro, m.data(), m.size(), &mlen), UCM_OK);
  EXPECT_NE(m.find("ucm_blocks_loaded_total 5"), std::string::npos) << m;
  EXPECT_NE(m.find("ucm_errors_total{code=\"NOT_FOUND\"} 1"), std::string::npos) << m;

  EXPECT_EQ(ucm_store_refresh(ro), UCM_OK);

  // Hash seeds (store_v1.md §7.1): a native namespace seeds its chains with its own id; a
  // converted one (extra.hash_seed_namespace) with its source's, so its hashes equal the source's.
  uint8_t seed[16];
  ASSERT_EQ(ucm_store_namespace_hash_seed(ro, ns, seed), UCM_OK) << ucm_last_error();
  EXPECT_EQ(0, std::memcmp(seed, ns, 16));
  static const char* hx = "0123456789abcdef";
  std::string ns_hex;
  for (uint8_t c : ns) ns_hex += std::string{hx[c >> 4], hx[c & 15]};
  const std::string conv =
      R"({"model_id":"capi-model","weights_digest":"ab","dtype":"bf16","block_size":4,"num_layers":2,)"
      R"("num_kv_heads":2,"head_dim":4,"name":"capi-bf16","extra":{"hash_seed_namespace":")" + ns_hex + R"("}})";
  uint8_t ns2[16];
  ASSERT_EQ(ucm_store_namespace_register(st, conv.c_str(), ns2), UCM_OK) << ucm_last_error();
  EXPECT_NE(0, std::memcmp(ns2, ns, 16));
  ASSERT_EQ(ucm_store_namespace_hash_seed(ro, ns2, seed), UCM_OK) << ucm_last_error();  // refreshes once
  EXPECT_EQ(0, std::memcmp(seed, ns, 16));
  std::vector<uint8_t> conv_hashes(16 * 5);
  ASSERT_EQ(ucm_hash_blocks(seed, nullptr, toks.data(), toks.size(), 4, conv_hashes.data(), 5, &nb), UCM_OK);
  EXPECT_EQ(conv_hashes, hashes);
  uint8_t nobody[16] = {9};
  EXPECT_EQ(ucm_store_namespace_hash_seed(ro, nobody, seed), UCM_E_NOT_FOUND);
  EXPECT_EQ(ucm_store_namespace_hash_seed(ro, nullptr, seed), UCM_E_INVALID);
  ucm_store_close(ro);
  ucm_store_close(st);
  fs::remove_all(p);
}
