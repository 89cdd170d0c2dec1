// tests/kernels/device_store.h: a store for the device-load tests, through the C ABI only: two bf16
// namespaces with 16-token blocks, "small" (L 2, H 4, D 64: 8 KiB pages, the gather kernel's
// size) and "big" (L 2, H 8, D 128: 32 KiB pages, the copy path's), each with 6 blocks of
// distinct bytes; plus host paged loads as the reference the device destinations must equal.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ucm/ucm.h"

namespace ucm::test {

struct DeviceNs {
  uint32_t L, T, H, D;
  uint8_t id[16];
  std::vector<uint8_t> hashes;  // [n][16]
  size_t payload() const { return size_t(L) * 2 * T * H * D * 2; }
  size_t row() const { return size_t(D) * 2; }
};

class DeviceStore : public ::testing::Test {
 protected:
  static constexpr size_t kBlocks = 6;
  void SetUp() override {
    static int k = 0;
    path = (std::filesystem::temp_directory_path() /
            ("ucm_devload_" + std::to_string(::getpid()) + "_" + std::to_string(k++)))
               .string();
    std::filesystem::remove_all(path);
    ucm_store_open_params p = ucm_store_default_open_params();
    p.mode = UCM_OPEN_CREATE;
    p.io_threads = 2;
    ASSERT_EQ(ucm_store_open(path.c_str(), &p, &store), UCM_OK) << ucm_last_error();
    add(&small, "small", 2, 4, 64);
    add(&big, "big", 2, 8, 128);
  }
  void TearDown() override {
    ucm_store_close(store);
    std::filesystem::remove_all(path);
  }

  void add(DeviceNs* ns, const std::string& name, uint32_t L, uint32_t H, uint32_t D) {
    *ns = DeviceNs{L, 16, H, D, {}, {}};
    const std::string desc = R"({"model_id":"dev-)" + name + R"(","weights_digest":"ab","dtype":"bf16","block_size":16,)" +
                             R"("num_layers":)" + std::to_string(L) + R"(,"num_kv_heads":)" + std::to_string(H) +
                             R"(,"head_dim":)" + std::to_string(D) + R"(,"name":")" + name + R"("})";
    ASSERT_EQ(ucm_store_namespace_register(store, desc.c_str(), ns->id), UCM_OK) << ucm_last_error();
    std::vector<uint32_t> toks(16 * kBlocks);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = uint32_t(i * 31 + D);
    ns->hashes.resize(16 * kBlocks);
    size_t nb = 0;
    ASSERT_EQ(ucm_hash_blocks(ns->id, nullptr, toks.data(), toks.size(), 16, ns->hashes.data(), kBlocks, &nb), UCM_OK);
    std::vector<uint8_t> parents(16 * kBlocks);
    ASSERT_EQ(ucm_hash_root(ns->id, parents.data()), UCM_OK);
    for (size_t i = 1; i < kBlocks; ++i) std::memcpy(&parents[16 * i], &ns->hashes[16 * (i - 1)], 16);
    std::vector<std::vector<uint8_t>> pl(kBlocks, std::vector<uint8_t>(ns->payload()));
    std::vector<const void*> kv;
    for (size_t i = 0; i < kBlocks; ++i) {
      for (size_t j = 0; j < pl[i].size(); ++j) pl[i][j] = uint8_t((i * 131 + j * 7 + j / 251) & 0xff);
      kv.push_back(pl[i].data());
    }
    ucm_task_t* t = nullptr;
    ASSERT_EQ(ucm_store_dump(store, ns->id, ns->hashes.data(), parents.data(), kBlocks, kv.data(), &t), UCM_OK);
    ASSERT_EQ(ucm_task_wait(t, -1), UCM_OK) << ucm_last_error();
    ucm_task_free(t);
  }

  /// Host paged load of hashes [n][16] with head range [h0, h1): pages[(i*L + l)*2 + kv] of
  /// [T][h1-h0][D]; per-block statuses into *status.
  std::vector<std::vector<uint8_t>> host_pages(const DeviceNs& ns, const std::vector<uint8_t>& hashes, uint32_t h0,
                                               uint32_t h1, std::vector<int>* status) {
    const size_t n = hashes.size() / 16;
    std::vector<std::vector<uint8_t>> pages(n * ns.L * 2, std::vector<uint8_t>(size_t(ns.T) * (h1 - h0) * ns.row(), 0));
    std::vector<void*> ptrs;
    for (auto& p : pages) ptrs.push_back(p.data());
    ucm_task_t* t = nullptr;
    EXPECT_EQ(ucm_store_load(store, ns.id, hashes.data(), n, UCM_DEST_PAGED, ptrs.data(), h0, h1, &t), UCM_OK)
        << ucm_last_error();
    (void)ucm_task_wait(t, -1);
    status->clear();
    for (size_t i = 0; i < n; ++i) status->push_back(ucm_task_block_status(t, i));
    ucm_task_free(t);
    return pages;
  }

  std::string path;
  ucm_store_t* store = nullptr;
  DeviceNs small{}, big{};
};

}  // namespace ucm::test
