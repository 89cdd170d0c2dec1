// kernels/src/plugin.cc: libucm_cuda.so's table (ucm/kernels/plugin.h) over the CUDA runtime and
// the launchers of ucm/kernels/launch.h.
#include "ucm/kernels/plugin.h"

#include <cuda_runtime_api.h>

#include "ucm/kernels/launch.h"

namespace {

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

int device_count(int* n) { return int(cudaGetDeviceCount(n)); }
const char* error_string(int e) { return cudaGetErrorString(cudaError_t(e)); }
int set_device(int d) { return int(cudaSetDevice(d)); }
int host_alloc(size_t bytes, void** out) {
  return int(cudaHostAlloc(out, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
}
int host_free(void* p) { return int(cudaFreeHost(p)); }
int scatter_layer(const ucm::kernels::ScatterArgs* a, void* stream, int* used_copies) {
  ucm::kernels::ScatterPath p;
  const cudaError_t e = ucm::kernels::scatter_layer(*a, as_stream(stream), &p);
  if (used_copies) *used_copies = p == ucm::kernels::ScatterPath::kCopies ? 1 : 0;
  return int(e);
}
int event_record(void* ev, void* stream) { return int(cudaEventRecord(static_cast<cudaEvent_t>(ev), as_stream(stream))); }
int launch_host_func(void* stream, void (*fn)(void*), void* data) {
  return int(cudaLaunchHostFunc(as_stream(stream), fn, data));
}
int rope_shift(const ucm::kernels::RopeShiftArgs* a, void* stream) {
  return int(ucm::kernels::rope_shift(*a, as_stream(stream)));
}
int stream_sync(void* stream) { return int(cudaStreamSynchronize(as_stream(stream))); }
int device_malloc(size_t bytes, void** out) { return int(cudaMalloc(out, bytes)); }
int device_free(void* p) { return int(cudaFree(p)); }
int copy_to_host(void* dst, const void* src, size_t bytes) { return int(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault)); }

const ucm_cuda_plugin kTable = {
    sizeof(ucm_cuda_plugin), ucm::kernels::kUcmCudaPluginAbi, "cuda", device_count, error_string, set_device,
    host_alloc, host_free, scatter_layer, event_record, launch_host_func, rope_shift, stream_sync,
    device_malloc, device_free, copy_to_host,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const ucm_cuda_plugin* ucm_cuda_plugin_v1(void) { return &kTable; }
