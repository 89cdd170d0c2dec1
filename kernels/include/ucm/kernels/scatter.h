// ucm/kernels/scatter.h: block payloads from (pinned) host staging into a paged KV cache, one
// layer per launch. Per-thread work and the copy plan; the launcher is in ucm/kernels/launch.h.
//
// Source: the staging of a load: n blocks of the store's payload layout (store_v1.md §4.2),
//   block i at src + i * block_bytes: [L][2][T][H][D] elements of the store dtype (all KV heads).
// Destination: one layer l of a paged KV cache, K and V with their own base pointer (vLLM's and
//   FlashInfer's per-layer caches), slot s at base + s * slot_stride bytes:
//   NHD: [T][h1-h0][D] (vLLM, FlashInfer "NHD"); HND: [h1-h0][T][D] (FlashInfer "HND").
// The dtype is preserved (bytes are copied, never converted). slots[i] < 0 skips block i (a block
// that failed to load: its destination stays untouched).
#pragma once
#include "ucm/kernels/hd.h"

namespace ucm::kernels {

enum : int32_t { kLayoutNHD = 0, kLayoutHND = 1 };

struct ScatterArgs {
  const uint8_t* src = nullptr;   ///< staging, [n][L][2][T][H][D] (host memory the device can read)
  const int64_t* slots = nullptr; ///< [n] destination slot of block i; < 0 = skip
  void* dst_k = nullptr;          ///< layer l's K cache: [num_slots] pages of slot_stride bytes
  void* dst_v = nullptr;          ///< layer l's V cache: [num_slots] pages of slot_stride bytes
  uint64_t n = 0;                 ///< blocks
  uint64_t block_bytes = 0;       ///< bytes of one staged block (L * 2 * T * H * D * elem)
  uint64_t slot_stride = 0;       ///< bytes between slots of dst_k / dst_v (>= T * (h1-h0) * D * elem)
  uint32_t layer = 0, L = 0, T = 0, H = 0, h0 = 0, h1 = 0;
  uint32_t row_bytes = 0;         ///< D * elem: one head of one token
  int32_t layout = kLayoutNHD;
  uint32_t unit = 0;              ///< bytes a thread copies: scatter_unit(a)
  int32_t force_path = -1;        ///< -1: by run size (launch.h scatter_path); 0: copies; 1: the kernel (benchmarks)
};

/// The widest of 16, 8, 4, 2, 1 bytes dividing row_bytes: one thread's copy.
UCM_HD uint32_t scatter_unit_bytes(uint32_t row_bytes) {
  for (uint32_t u = 16; u > 1; u /= 2)
    if (row_bytes % u == 0) return u;
  return 1;
}

/// One thread's copy for a: the widest unit that row_bytes, block_bytes, slot_stride and the
/// three base addresses are all multiples of, so that every access is aligned to it.
UCM_HD uint32_t scatter_unit_for(const ScatterArgs& a) {
  const uint64_t all = uint64_t(a.row_bytes) | a.block_bytes | a.slot_stride | uint64_t(uintptr_t(a.src)) |
                       uint64_t(uintptr_t(a.dst_k)) | uint64_t(uintptr_t(a.dst_v));
  for (uint32_t u = 16; u > 1; u /= 2)
    if (all % u == 0) return u;
  return 1;
}

/// Threads of one layer's launch: n * 2 * T * (h1-h0) * row_bytes / unit.
UCM_HD uint64_t scatter_threads(const ScatterArgs& a) {
  return a.n * 2 * uint64_t(a.T) * (a.h1 - a.h0) * (a.row_bytes / a.unit);
}

/// Bytes both sides hold contiguously, i.e. one cudaMemcpyAsync: a whole (block, K|V) page when
/// all heads go to NHD, one token's head range for a head range in NHD, one head row for HND.
UCM_HD uint64_t scatter_run_bytes(const ScatterArgs& a) {
  const uint64_t heads = a.h1 - a.h0;
  if (a.layout == kLayoutNHD) return heads == a.H ? uint64_t(a.T) * heads * a.row_bytes : heads * a.row_bytes;
  return a.row_bytes;
}

/// The rule by run size, where the path is not measured (launch.h, scatter_layer: a stream being
/// captured into a graph, a failed measurement, UCM_SCATTER_PATH=threshold): runs of at least
/// this many bytes go through async copies, smaller ones through the gather kernel (on H100,
/// batched host-to-device copies of 4-24 KiB pieces reach 4-7 GB/s against ~40 GB/s at >= 28 KiB:
/// vLLM PR #42212).
constexpr uint64_t kMinCopyRunBytes = 28 * 1024;

/// Source and destination byte offsets of copy unit `idx` (< scatter_threads); false if its
/// block is skipped. Index order (fastest first): unit, head, token, K|V, block.
UCM_HD bool scatter_offsets(const ScatterArgs& a, uint64_t idx, uint64_t* src_off, uint8_t** dst) {
  const uint64_t units = a.row_bytes / a.unit, heads = a.h1 - a.h0;
  const uint64_t u = idx % units;
  uint64_t r = idx / units;
  const uint64_t h = r % heads;
  r /= heads;
  const uint64_t t = r % a.T;
  r /= a.T;
  const uint64_t kv = r % 2, i = r / 2;
  const int64_t slot = a.slots[i];
  if (slot < 0) return false;
  *src_off = i * a.block_bytes + ((uint64_t(a.layer) * 2 + kv) * a.T + t) * a.H * a.row_bytes +
             (a.h0 + h) * a.row_bytes + u * a.unit;
  const uint64_t row = a.layout == kLayoutNHD ? t * heads + h : h * a.T + t;
  *dst = static_cast<uint8_t*>(kv ? a.dst_v : a.dst_k) + uint64_t(slot) * a.slot_stride + row * a.row_bytes +
         u * a.unit;
  return true;
}

struct alignas(16) Bytes16 {
  uint64_t lo, hi;
};

/// One thread's work: copies unit `idx`.
UCM_HD void scatter_unit(const ScatterArgs& a, uint64_t idx) {
  uint64_t so;
  uint8_t* d;
  if (!scatter_offsets(a, idx, &so, &d)) return;
  const uint8_t* s = a.src + so;
  switch (a.unit) {
    case 16: *reinterpret_cast<Bytes16*>(d) = *reinterpret_cast<const Bytes16*>(s); break;
    case 8: *reinterpret_cast<uint64_t*>(d) = *reinterpret_cast<const uint64_t*>(s); break;
    case 4: *reinterpret_cast<uint32_t*>(d) = *reinterpret_cast<const uint32_t*>(s); break;
    case 2: *reinterpret_cast<uint16_t*>(d) = *reinterpret_cast<const uint16_t*>(s); break;
    default: *d = *s; break;
  }
}

/// Run `j` of the copy plan (j < n * 2 * runs_per_page): source offset, destination, and whether
/// its block is skipped. Runs per (block, K|V): 1, T (NHD head range) or T * (h1-h0) (HND).
UCM_HD uint64_t scatter_runs_per_page(const ScatterArgs& a) {
  const uint64_t heads = a.h1 - a.h0;
  if (a.layout == kLayoutNHD) return heads == a.H ? 1 : a.T;
  return uint64_t(a.T) * heads;
}
UCM_HD bool scatter_run(const ScatterArgs& a, uint64_t j, uint64_t* src_off, uint8_t** dst) {
  // The first unit of run j, in the thread indexing above.
  const uint64_t units = a.row_bytes / a.unit, heads = a.h1 - a.h0, per = scatter_runs_per_page(a);
  const uint64_t page = j / per, k = j % per;
  uint64_t t = 0, h = 0;
  if (a.layout == kLayoutNHD) t = per == 1 ? 0 : k;
  else t = k % a.T, h = k / a.T;
  return scatter_offsets(a, ((page * a.T + t) * heads + h) * units, src_off, dst);
}

}  // namespace ucm::kernels
