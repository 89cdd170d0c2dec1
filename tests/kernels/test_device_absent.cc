// Without a CUDA device (or without libucm_cuda.so), device destinations are refused at once with
// UCM_E_NOT_SUPPORTED and a message that says why, and host loads are unaffected. On a machine
// with a GPU this test skips (tests/kernels/test_kernels_gpu.cc covers it).
#include "device_store.h"
#include "ucm/blend.h"

namespace ucm::test {
namespace {

class DeviceAbsent : public DeviceStore {
 protected:
  void SetUp() override {
    int n = 0;
    if (ucm_cuda_device_count(&n) == UCM_OK && n > 0) GTEST_SKIP() << n << " CUDA devices present";
    DeviceStore::SetUp();
  }
};

TEST_F(DeviceAbsent, DeviceCountIsZeroOrNotSupported) {
  int n = -1;
  const int rc = ucm_cuda_device_count(&n);
  EXPECT_TRUE(rc == UCM_OK || rc == UCM_E_NOT_SUPPORTED) << rc;
  EXPECT_EQ(n, 0);
}

TEST_F(DeviceAbsent, DeviceLoadIsNotSupportedAndSaysWhy) {
  std::vector<uint8_t> mem(small.L * 2 * 16 * 4 * 128);
  std::vector<void*> caches;
  for (size_t k = 0; k < small.L * 2; ++k) caches.push_back(mem.data() + k * 16 * 4 * 128);
  std::vector<int64_t> slots(kBlocks, 0);
  ucm_store_load_params p = ucm_store_default_load_params();
  p.dest_kind = UCM_DEST_DEVICE_PAGED;
  p.layer_caches = caches.data();
  p.slots = slots.data();
  ucm_task_t* t = nullptr;
  EXPECT_EQ(ucm_store_load_ex(store, small.id, small.hashes.data(), kBlocks, &p, &t), UCM_E_NOT_SUPPORTED);
  EXPECT_EQ(t, nullptr);
  const std::string why = ucm_last_error();
  EXPECT_TRUE(why.find("CUDA device 0 is not available") != std::string::npos ||
              why.find("libucm_cuda.so") != std::string::npos)
      << why;
  ucm_rope_params r = ucm_rope_default_params();
  r.head_dim = 64;
  uint16_t k[128] = {};
  EXPECT_EQ(ucm_rope_shift_device(&r, k, UCM_DTYPE_BF16, 1, 2, 128, 3, 0, nullptr), UCM_E_NOT_SUPPORTED);
  // Host loads still work.
  std::vector<int> st;
  host_pages(small, small.hashes, 0, 4, &st);
  for (int s : st) EXPECT_EQ(s, UCM_OK);
}

}  // namespace
}  // namespace ucm::test
