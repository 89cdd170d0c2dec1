// ucm/kernels/plugin.h: the table libucm finds in libucm_cuda.so (kernels/src/plugin.cc), the
// one library that links the CUDA runtime. libucm dlopens it the first time a device
// destination is used (lib/src/cuda_plugin.cc), so one libucm serves CPU-only and GPU servers
// and a CPU-only process never loads CUDA. Internal to ucm: both sides are built from this
// header; abi_version changes whenever a member does.
//
// Every int is a cudaError_t (0 = success); error_string names one. Streams and events are
// cudaStream_t / cudaEvent_t passed as void*.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ucm/kernels/rope.h"
#include "ucm/kernels/scatter.h"

extern "C" {

struct ucm_cuda_plugin {
  uint32_t struct_size;   ///< sizeof(ucm_cuda_plugin)
  uint32_t abi_version;   ///< kUcmCudaPluginAbi
  const char* name;       ///< "cuda" (or "fake" for the host-run test plugin)
  int (*device_count)(int* n);
  const char* (*error_string)(int err);
  int (*set_device)(int device);
  /// Pinned host memory the device can read (cudaHostAlloc, mapped + portable).
  int (*host_alloc)(size_t bytes, void** out);
  int (*host_free)(void* p);
  /// One layer of a paged load (ucm::kernels::scatter_layer); *used_copies = 1 for the copy path.
  int (*scatter_layer)(const ucm::kernels::ScatterArgs* a, void* stream, int* used_copies);
  int (*event_record)(void* event, void* stream);
  /// fn(data) once the stream reaches this point (cudaLaunchHostFunc: fn must not call CUDA).
  int (*launch_host_func)(void* stream, void (*fn)(void*), void* data);
  int (*rope_shift)(const ucm::kernels::RopeShiftArgs* a, void* stream);
  int (*stream_sync)(void* stream);
  /// Device memory for benches and tests (cudaMalloc / cudaFree), and a synchronous copy of
  /// device (or any) memory to the host (cudaMemcpy, cudaMemcpyDefault).
  int (*device_malloc)(size_t bytes, void** out);
  int (*device_free)(void* p);
  int (*copy_to_host)(void* dst, const void* src, size_t bytes);
};

/// The entry point of libucm_cuda.so.
typedef const ucm_cuda_plugin* (*ucm_cuda_plugin_fn)(void);
#define UCM_CUDA_PLUGIN_SYMBOL "ucm_cuda_plugin_v1"
}

namespace ucm::kernels {
constexpr uint32_t kUcmCudaPluginAbi = 1;
}
