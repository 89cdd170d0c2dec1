// ucm_store_load_ex into device destinations, on a machine without a GPU: libucm loads the host-run
// stand-in of libucm_cuda.so (fake_cuda_plugin.cc, through UCM_CUDA_PLUGIN), whose "device
// memory" is host memory and whose launches run the kernels' per-thread functions. So everything
// but the CUDA launch is checked here: the paged caches equal a host paged load of the same
// blocks byte for byte (NHD, HND, TP head ranges, strided slots, both copy paths), failed and
// skipped blocks leave their slots alone, every layer's event and callback fire in order, and the
// errors are the documented ones. tests/kernels/test_kernels_gpu.cc repeats the byte comparison on
// a GPU.
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "device_store.h"
#include "ucm/blend.h"

namespace ucm::test {
namespace {

// The fake plugin's launch counters (by path), from the copy libucm loaded (RTLD_NOLOAD: the same
// handle, so the same counters); first makes libucm load it.
void ucm_fake_cuda_counts(int* copies, int* kernels) {
  int n = 0;
  (void)ucm_cuda_device_count(&n);
  const char* path = std::getenv("UCM_CUDA_PLUGIN");
  void* h = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  auto fn = h ? reinterpret_cast<void (*)(int*, int*)>(dlsym(h, "ucm_fake_cuda_counts")) : nullptr;
  ASSERT_NE(fn, nullptr) << "UCM_CUDA_PLUGIN must name the fake plugin, loaded by libucm";
  fn(copies, kernels);
  dlclose(h);
}

struct Layers {
  std::mutex mu;
  std::vector<std::pair<uint32_t, int>> calls;
};
void on_layer(uint32_t layer, int status, void* data) {
  auto* l = static_cast<Layers*>(data);
  std::lock_guard<std::mutex> g(l->mu);
  l->calls.emplace_back(layer, status);
}

// A "device" cache per (layer, K|V): slots_total slots of stride bytes, filled with 0xA5.
struct Cache {
  std::vector<std::vector<uint8_t>> mem;
  std::vector<void*> ptrs;
  Cache(size_t L, size_t slots_total, size_t stride) : mem(L * 2, std::vector<uint8_t>(slots_total * stride, 0xA5)) {
    for (auto& m : mem) ptrs.push_back(m.data());
  }
};

class DeviceLoad : public DeviceStore {
 protected:
  // Loads hashes (7: blocks 0..5 and a missing one) into slots, checks every slot against the
  // host paged load (transposed for HND) and the untouched bytes.
  void check(const DeviceNs& ns, int kind, uint32_t h0, uint32_t h1, uint64_t extra_stride) {
    std::vector<uint8_t> hashes = ns.hashes;
    hashes.resize(hashes.size() + 16, 0x42);  // block 6: not stored
    const size_t n = kBlocks + 1, slots_total = 12;
    const std::vector<int64_t> slots = {3, 0, -1, 11, 5, 7, 9};
    const size_t heads = h1 - h0, page = size_t(ns.T) * heads * ns.row(), stride = page + extra_stride;
    Cache cache(ns.L, slots_total, stride);
    std::vector<int> events(ns.L, 0);
    std::vector<void*> ev;
    for (auto& e : events) ev.push_back(&e);
    Layers layers;
    ucm_store_load_params p = ucm_store_default_load_params();
    p.dest_kind = kind;
    p.head_begin = h0;
    p.head_end = h1 == ns.H && h0 == 0 ? 0 : h1;
    p.layer_caches = cache.ptrs.data();
    p.slots = slots.data();
    p.slot_stride = extra_stride ? stride : 0;
    p.layer_events = ev.data();
    p.on_layer = on_layer;
    p.on_layer_data = &layers;
    ucm_task_t* t = nullptr;
    ASSERT_EQ(ucm_store_load_ex(store, ns.id, hashes.data(), n, &p, &t), UCM_OK) << ucm_last_error();
    EXPECT_EQ(ucm_task_wait(t, -1), UCM_E_NOT_FOUND);  // the first failed block's code
    for (size_t i = 0; i < kBlocks; ++i) EXPECT_EQ(ucm_task_block_status(t, i), UCM_OK) << i;
    EXPECT_EQ(ucm_task_block_status(t, kBlocks), UCM_E_NOT_FOUND);
    ucm_task_free(t);
    for (int e : events) EXPECT_EQ(e, 1);
    ASSERT_EQ(layers.calls.size(), ns.L);
    for (uint32_t l = 0; l < ns.L; ++l) EXPECT_EQ(layers.calls[l], std::make_pair(l, int(UCM_OK)));

    std::vector<int> st;
    const auto ref = host_pages(ns, hashes, h0, h1, &st);
    Cache want(ns.L, slots_total, stride);
    for (size_t i = 0; i < n; ++i) {
      if (slots[i] < 0 || st[i] != UCM_OK) continue;
      for (size_t l = 0; l < ns.L; ++l)
        for (size_t kv = 0; kv < 2; ++kv) {
          const auto& src = ref[(i * ns.L + l) * 2 + kv];  // [T][heads][D]
          uint8_t* dst = want.mem[l * 2 + kv].data() + size_t(slots[i]) * stride;
          for (size_t tt = 0; tt < ns.T; ++tt)
            for (size_t h = 0; h < heads; ++h) {
              const size_t row = kind == UCM_DEST_DEVICE_PAGED ? tt * heads + h : h * ns.T + tt;
              std::memcpy(dst + row * ns.row(), src.data() + (tt * heads + h) * ns.row(), ns.row());
            }
        }
    }
    for (size_t k = 0; k < cache.mem.size(); ++k) ASSERT_EQ(cache.mem[k], want.mem[k]) << "layer*2+kv " << k;
  }
};

TEST_F(DeviceLoad, FakePluginReportsOneDevice) {
  int n = -1;
  ASSERT_EQ(ucm_cuda_device_count(&n), UCM_OK) << ucm_last_error();
  EXPECT_EQ(n, 1);
}

TEST_F(DeviceLoad, NhdAllHeadsThroughTheKernel) {
  int c0, k0, c1, k1;
  ucm_fake_cuda_counts(&c0, &k0);
  check(small, UCM_DEST_DEVICE_PAGED, 0, 4, 0);
  ucm_fake_cuda_counts(&c1, &k1);
  EXPECT_EQ(c1 - c0, 0);
  EXPECT_EQ(k1 - k0, 2);  // 8 KiB pages: the gather kernel, one launch per layer
}

TEST_F(DeviceLoad, NhdAllHeadsThroughCopies) {
  int c0, k0, c1, k1;
  ucm_fake_cuda_counts(&c0, &k0);
  check(big, UCM_DEST_DEVICE_PAGED, 0, 8, 0);
  ucm_fake_cuda_counts(&c1, &k1);
  EXPECT_EQ(c1 - c0, 2);  // 32 KiB pages: async copies
  EXPECT_EQ(k1 - k0, 0);
}

TEST_F(DeviceLoad, TpShardHeadRangeThroughTheKernel) {
  int c0, k0, c1, k1;
  ucm_fake_cuda_counts(&c0, &k0);
  check(big, UCM_DEST_DEVICE_PAGED, 2, 4, 0);  // TP-4 rank 1 of 8 heads
  ucm_fake_cuda_counts(&c1, &k1);
  EXPECT_EQ(c1 - c0, 0);
  EXPECT_EQ(k1 - k0, 2);
}

TEST_F(DeviceLoad, HndAndStridedSlots) {
  check(small, UCM_DEST_DEVICE_PAGED_HND, 0, 4, 0);
  check(small, UCM_DEST_DEVICE_PAGED_HND, 1, 3, 0);
  // FlashInfer's [num_blocks][2][T][H][D]: K and V pages interleave, slot stride = 2 pages.
  check(small, UCM_DEST_DEVICE_PAGED, 0, 4, size_t(16) * 4 * 128);
}

TEST_F(DeviceLoad, FailedLayerFailsItsBlocksAndCallsBack) {
  setenv("UCM_FAKE_CUDA_FAIL_LAYER", "1", 1);
  Cache cache(small.L, 6, 16 * 4 * 128);
  std::vector<int64_t> slots = {0, 1, 2, 3, 4, 5};
  Layers layers;
  ucm_store_load_params p = ucm_store_default_load_params();
  p.dest_kind = UCM_DEST_DEVICE_PAGED;
  p.layer_caches = cache.ptrs.data();
  p.slots = slots.data();
  p.on_layer = on_layer;
  p.on_layer_data = &layers;
  ucm_task_t* t = nullptr;
  ASSERT_EQ(ucm_store_load_ex(store, small.id, small.hashes.data(), kBlocks, &p, &t), UCM_OK) << ucm_last_error();
  EXPECT_EQ(ucm_task_wait(t, -1), UCM_E_IO);
  for (size_t i = 0; i < kBlocks; ++i) EXPECT_EQ(ucm_task_block_status(t, i), UCM_E_IO);
  ucm_task_free(t);
  unsetenv("UCM_FAKE_CUDA_FAIL_LAYER");
  ASSERT_EQ(layers.calls.size(), 2u);
  EXPECT_EQ(layers.calls[0], std::make_pair(0u, int(UCM_OK)));
  EXPECT_EQ(layers.calls[1], std::make_pair(1u, int(UCM_E_IO)));
}

TEST_F(DeviceLoad, BadArgumentsFailAtOnce) {
  Cache cache(small.L, 6, 16 * 4 * 128);
  std::vector<int64_t> slots(kBlocks, 0);
  ucm_store_load_params p = ucm_store_default_load_params();
  p.dest_kind = UCM_DEST_DEVICE_PAGED;
  p.layer_caches = cache.ptrs.data();
  p.slots = slots.data();
  ucm_task_t* t = reinterpret_cast<ucm_task_t*>(0x1);
  p.slot_stride = 100;  // below a page
  EXPECT_EQ(ucm_store_load_ex(store, small.id, small.hashes.data(), kBlocks, &p, &t), UCM_E_INVALID);
  EXPECT_NE(std::string(ucm_last_error()).find("slot_stride"), std::string::npos) << ucm_last_error();
  EXPECT_EQ(t, nullptr);
  p.slot_stride = 0;
  p.head_begin = 3, p.head_end = 5;
  EXPECT_EQ(ucm_store_load_ex(store, small.id, small.hashes.data(), kBlocks, &p, &t), UCM_E_INVALID);
  p.head_begin = 0, p.head_end = 0;
  p.device = 3;  // the fake has one device
  EXPECT_EQ(ucm_store_load_ex(store, small.id, small.hashes.data(), kBlocks, &p, &t), UCM_E_NOT_SUPPORTED);
  EXPECT_NE(std::string(ucm_last_error()).find("CUDA device 3"), std::string::npos) << ucm_last_error();
  p.device = 0;
  p.layer_caches = nullptr;
  EXPECT_EQ(ucm_store_load_ex(store, small.id, small.hashes.data(), kBlocks, &p, &t), UCM_E_INVALID);
  p.layer_caches = cache.ptrs.data();
  p.dest_kind = 17;
  EXPECT_EQ(ucm_store_load_ex(store, small.id, small.hashes.data(), kBlocks, &p, &t), UCM_E_INVALID);
  p.dest_kind = UCM_DEST_DEVICE_PAGED;
  p.struct_size = 8;
  EXPECT_EQ(ucm_store_load_ex(store, small.id, small.hashes.data(), kBlocks, &p, &t), UCM_E_INVALID);
  EXPECT_EQ(ucm_store_load(store, small.id, small.hashes.data(), kBlocks, UCM_DEST_DEVICE_PAGED, cache.ptrs.data(), 0, 0,
                           &t),
            UCM_E_INVALID);  // device kinds only through ucm_store_load_ex
}

// The growth rule: a caller built against the first, smallest ucm_store_load_params (host fields
// up to head_end) still loads; the fields it lacks take their defaults.
TEST_F(DeviceLoad, SmallerParamsStructLoadsWithDefaults) {
  std::vector<std::vector<uint8_t>> bufs(kBlocks, std::vector<uint8_t>(small.payload()));
  std::vector<void*> ptrs;
  for (auto& b : bufs) ptrs.push_back(b.data());
  ucm_store_load_params p = ucm_store_default_load_params();
  p.struct_size = offsetof(ucm_store_load_params, head_end) + sizeof(uint32_t);
  p.ptrs = ptrs.data();
  p.layer_caches = reinterpret_cast<void* const*>(0x10);  // beyond struct_size: must be ignored
  ucm_task_t* t = nullptr;
  ASSERT_EQ(ucm_store_load_ex(store, small.id, small.hashes.data(), kBlocks, &p, &t), UCM_OK) << ucm_last_error();
  EXPECT_EQ(ucm_task_wait(t, -1), UCM_OK);
  ucm_task_free(t);
  std::vector<int> st;
  const auto ref = host_pages(small, small.hashes, 0, 4, &st);
  const size_t page = ref[0].size();
  for (size_t i = 0; i < kBlocks; ++i)
    for (size_t k = 0; k < small.L * 2; ++k)
      ASSERT_EQ(0, std::memcmp(bufs[i].data() + k * page, ref[i * small.L * 2 + k].data(), page));
}

TEST_F(DeviceLoad, RopeShiftDeviceEqualsHost) {
  ucm_rope_params r = ucm_rope_default_params();
  r.head_dim = 64;
  std::vector<uint16_t> keys(10 * 2 * 64), ref;
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = uint16_t(0x3f00 + (i * 37) % 200);
  ref = keys;
  ASSERT_EQ(ucm_rope_shift(&r, ref.data(), UCM_DTYPE_BF16, 10, 2, 128, 77), UCM_OK);
  ASSERT_EQ(ucm_rope_shift_device(&r, keys.data(), UCM_DTYPE_BF16, 10, 2, 128, 77, 0, nullptr), UCM_OK)
      << ucm_last_error();
  EXPECT_EQ(keys, ref);
}

}  // namespace
}  // namespace ucm::test
