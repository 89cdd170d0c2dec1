// tests/kernels/fake_cuda_plugin.cc: a libucm_cuda.so stand-in that runs on the host, so the
// device-load path of libucm (staging, per-layer launches, events, callbacks, failed blocks) is
// tested on machines without a GPU. "Device memory" is host memory; a launch runs the kernels'
// per-thread functions over the grid (tests/kernels/harness.h), choosing the path as the real
// launcher does; the stream runs everything at once. Events are int counters: event_record adds
// 1 to *(int*)event. Loaded through UCM_CUDA_PLUGIN.
#include <atomic>
#include <cstdlib>

#include "harness.h"
#include "ucm/kernels/plugin.h"

namespace {

namespace k = ucm::kernels;
std::atomic<int> g_copies{0}, g_kernels{0};

int device_count(int* n) {
  const char* e = std::getenv("UCM_FAKE_CUDA_DEVICES");
  *n = e ? std::atoi(e) : 1;
  return 0;
}
const char* error_string(int e) { return e == 0 ? "no error" : "fake CUDA error"; }
int set_device(int) { return 0; }
int host_alloc(size_t bytes, void** out) {
  *out = std::aligned_alloc(4096, (bytes + 4095) & ~size_t{4095});
  return *out ? 0 : 2;  // cudaErrorMemoryAllocation
}
int host_free(void* p) {
  std::free(p);
  return 0;
}
int scatter_layer(const k::ScatterArgs* a0, void*, int* used_copies) {
  k::ScatterArgs a = *a0;
  if (std::getenv("UCM_FAKE_CUDA_FAIL_LAYER") && a.layer == uint32_t(std::atoi(std::getenv("UCM_FAKE_CUDA_FAIL_LAYER"))))
    return 700;  // cudaErrorIllegalAddress
  a.unit = k::scatter_unit_for(a);
  const bool copies = k::scatter_run_bytes(a) >= k::kMinCopyRunBytes;
  if (copies) k::host::scatter_copies(a);
  else k::host::scatter(a);
  (copies ? g_copies : g_kernels).fetch_add(1);
  if (used_copies) *used_copies = copies ? 1 : 0;
  return 0;
}
int event_record(void* ev, void*) {
  ++*static_cast<int*>(ev);
  return 0;
}
int launch_host_func(void*, void (*fn)(void*), void* data) {
  fn(data);
  return 0;
}
int rope_shift(const k::RopeShiftArgs* a, void*) {
  k::host::rope_shift(*a);
  return 0;
}
int stream_sync(void*) { return 0; }
int copy_to_host(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
  return 0;
}

const ucm_cuda_plugin kTable = {
    sizeof(ucm_cuda_plugin), k::kUcmCudaPluginAbi, "fake", device_count, error_string, set_device, host_alloc,
    host_free, scatter_layer, event_record, launch_host_func, rope_shift, stream_sync, host_alloc, host_free,
    copy_to_host,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const ucm_cuda_plugin* ucm_cuda_plugin_v1(void) { return &kTable; }
/// Launches by path since load: [0] copies, [1] gather kernel.
extern "C" __attribute__((visibility("default"))) void ucm_fake_cuda_counts(int* copies, int* kernels) {
  *copies = g_copies.load();
  *kernels = g_kernels.load();
}
