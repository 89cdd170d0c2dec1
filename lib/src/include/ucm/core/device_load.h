// lib/src/include/ucm/core/device_load.h: loads into a paged KV cache in GPU memory
// (ucm_store_load_ex with UCM_DEST_DEVICE_PAGED*). Internal to libucm.
//
// The blocks are read and checksum-verified into pinned host staging by the store's load (all
// heads, the store's payload layout), then one launch per layer moves them into the device cache
// (ucm::kernels::scatter_layer, through libucm_cuda.so): async copies or the gather kernel,
// whichever the plugin measured faster on the shape the first time it met it. After layer l is enqueued its event is
// recorded and its callback enqueued, so a server can start layer 0 while later layers arrive.
// The task finishes when the stream has run every copy (a stream callback); the staging then
// returns to a process-wide pool.
#pragma once
#include <memory>
#include <vector>

#include "ucm/status.h"
#include "ucm/store.h"

namespace ucm::detail {

struct DeviceDest {
  int32_t layout = 0;             ///< ucm::kernels::kLayoutNHD / kLayoutHND
  HeadRange heads;                ///< [begin, end); end 0 = all
  std::vector<void*> layer_caches;///< [L * 2]: (layer l, K|V) at l * 2 + kv, device memory
  std::vector<int64_t> slots;     ///< [n] slot of block i; < 0 = skip
  uint64_t slot_stride = 0;       ///< bytes; 0 = T * (h1-h0) * D * elem
  int32_t device = 0;
  void* stream = nullptr;
  std::vector<void*> layer_events;///< [L] cudaEvent_t, or empty
  void (*on_layer)(uint32_t layer, int status, void* user_data) = nullptr;
  void* on_layer_data = nullptr;
};

/// Starts a device load of n blocks of ns. Errors before any I/O (returned, no task): NotFound
/// (namespace), InvalidArgument (head range, pointer counts, null pointers, slot stride),
/// NotSupported (no libucm_cuda.so or no CUDA device: the message says which), IOError (a CUDA
/// call failed). On OK *out is the task; per-block statuses as for a host load, plus IOError for
/// the blocks of a layer whose copies could not be enqueued.
Status load_device(Store& store, const NamespaceId& ns, const BlockHash* hashes, size_t n, DeviceDest dest,
                   std::shared_ptr<Task>* out);

/// Layers of device loads this process scattered through async copies and through the gather
/// kernel, since it started (the store bench reports the path its loads took).
void scatter_path_counts(uint64_t* copy_layers, uint64_t* kernel_layers);

}  // namespace ucm::detail
