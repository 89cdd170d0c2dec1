// lib/src/include/ucm/core/cuda_plugin.h: libucm's access to libucm_cuda.so (ucm/kernels/plugin.h),
// loaded on first use. Internal to libucm.
#pragma once
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ucm/kernels/plugin.h"
#include "ucm/status.h"

namespace ucm::detail {

/// The plugin table, loading it on the first call: $UCM_CUDA_PLUGIN when set (a path), else
/// libucm_cuda.so.<SOVERSION> beside libucm.so, else the loader's search path. NotSupported,
/// naming what was tried and the loader's error, when it cannot be loaded or has another ABI.
/// The result of the first call is kept for the process.
Status cuda_plugin(const ucm_cuda_plugin** out);

/// cuda_plugin(), then checks that CUDA device `device` exists: NotSupported "CUDA device N is not
/// available (K devices[; the runtime's error])" otherwise. What every device entry point calls first.
Status cuda_device(int device, const ucm_cuda_plugin** out);

/// "<call>: <CUDA error name text> (cudaError_t N)" as a Status (IOError for runtime failures).
Status cuda_status(const ucm_cuda_plugin& p, int err, const std::string& call);

/// Pinned, device-readable host buffers, reused across loads (a bounded free list per process).
class PinnedPool {
 public:
  static PinnedPool& get();
  /// A buffer of at least bytes; *cap gets its size.
  Status take(const ucm_cuda_plugin& p, size_t bytes, void** out, size_t* cap);
  /// Returns a buffer from take(). No CUDA call (safe in a stream callback).
  void give(void* p, size_t cap);

 private:
  static constexpr size_t kKeep = 8;
  std::mutex mu_;
  std::vector<std::pair<void*, size_t>> free_;  // at most kKeep
  std::vector<void*> release_;                  // beyond kKeep: freed by the next take()
};

}  // namespace ucm::detail
