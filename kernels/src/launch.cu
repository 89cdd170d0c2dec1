// kernels/src/launch.cu: the launchers of ucm/kernels/launch.h. Each kernel calls its UCM_HD
// per-thread function; the host-run harness (tests/kernels) calls the same functions.
#include <cuda_runtime.h>

#include "ucm/kernels/launch.h"

namespace ucm::kernels {
namespace {

constexpr uint32_t kThreads = 256;

uint32_t blocks_for(uint64_t threads) {
  const uint64_t b = (threads + kThreads - 1) / kThreads;
  return uint32_t(b < 65535ull * 1024 ? b : 65535ull * 1024);
}

__global__ void scatter_kernel(ScatterArgs a, uint64_t total) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < total; i += uint64_t(gridDim.x) * blockDim.x)
    scatter_unit(a, i);
}

__global__ void scores_kernel(ScoreArgs a) {
  const uint64_t total = uint64_t(a.S) * a.n;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < total; i += uint64_t(gridDim.x) * blockDim.x)
    score_block(a, uint32_t(i / a.n), uint32_t(i % a.n));
}

__global__ void sign_hash_kernel(SignHashArgs a) {
  const uint64_t total = uint64_t(a.S) * (a.B / 8);
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < total; i += uint64_t(gridDim.x) * blockDim.x)
    sign_hash_byte(a, uint32_t(i / (a.B / 8)), uint32_t(i % (a.B / 8)));
}

__global__ void rope_kernel(RopeShiftArgs a) {
  const uint32_t half = a.D / 2;
  const uint64_t total = a.n_tokens * a.n_heads * half;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < total; i += uint64_t(gridDim.x) * blockDim.x)
    rope_shift_pair(a, i / (uint64_t(a.n_heads) * half), uint32_t(i / half % a.n_heads), uint32_t(i % half));
}

// Selection runs one warp per set (kSetsPerBlock sets per CUDA block): every sum is a warp
// shuffle, with no block-wide barrier, so a set's 64 radix rounds take a few microseconds and the
// sets of a request run side by side.
constexpr uint32_t kSetsPerBlock = 8;

__device__ uint32_t warp_sum(uint32_t v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Compaction of set s's marks into idx/count (chunk_selected / chunk_write), by one warp.
__device__ void compact(const SelectArgs& a, uint32_t s, uint32_t lane) {
  __syncwarp();
  const uint32_t mine = chunk_selected(a, s, lane, 32);
  uint32_t incl = mine;
  for (int o = 1; o < 32; o *= 2) {
    const uint32_t v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= uint32_t(o)) incl += v;
  }
  const uint32_t total = __shfl_sync(0xffffffffu, incl, 31);
  if (lane == 0 && a.count) a.count[s] = total;
  if (a.idx) chunk_write(a, s, lane, 32, incl - mine);
}

__device__ void topk_set(const SelectArgs& a, uint32_t s, uint32_t lane) {
  const uint32_t forced = warp_sum(topk_count_forced(a, lane, 32));
  const uint32_t m = a.k > forced ? a.k - forced : 0;
  uint64_t thr = 0;
  if (m > 0) thr = radix_select(m, [&](uint64_t p) { return warp_sum(topk_count_ge(a, s, lane, 32, p)); });
  for (uint32_t c = lane; c < a.n; c += 32) topk_mark(a, s, c, m, thr);
  compact(a, s, lane);
}

__global__ void topk_kernel(SelectArgs a) {
  const uint32_t s = blockIdx.x * kSetsPerBlock + threadIdx.x / 32;
  if (s < a.S) topk_set(a, s, threadIdx.x % 32);
}

__global__ void psa_kernel(SelectArgs a) {
  const uint32_t s = blockIdx.x * kSetsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (s >= a.S) return;
  for (uint32_t c = lane; c < a.n; c += 32) psa_mark(a, s, c);
  compact(a, s, lane);
}

__global__ void score_topk_kernel(ScoreArgs sc, SelectArgs a) {
  const uint32_t s = blockIdx.x * kSetsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (s >= a.S) return;
  for (uint32_t c = lane; c < sc.n; c += 32) score_block(sc, s, c);
  __syncwarp();
  __threadfence_block();
  topk_set(a, s, lane);
}

uint32_t set_blocks(uint32_t S) { return (S + kSetsPerBlock - 1) / kSetsPerBlock; }

cudaError_t launched() { return cudaGetLastError(); }

}  // namespace

cudaError_t scatter_layer(const ScatterArgs& a0, cudaStream_t stream, ScatterPath* path) {
  ScatterArgs a = a0;
  if (!a.src || !a.slots || !a.dst_k || !a.dst_v || a.row_bytes == 0 || a.h1 <= a.h0 || a.h1 > a.H ||
      a.layer >= a.L || a.slot_stride < uint64_t(a.T) * (a.h1 - a.h0) * a.row_bytes)
    return cudaErrorInvalidValue;
  a.unit = scatter_unit_for(a);
  const ScatterPath p = scatter_path(a);
  if (path) *path = p;
  if (a.n == 0) return cudaSuccess;
  if (p == ScatterPath::kCopies) {
    const uint64_t runs = a.n * 2 * scatter_runs_per_page(a), bytes = scatter_run_bytes(a);
    for (uint64_t j = 0; j < runs; ++j) {
      uint64_t so;
      uint8_t* d;
      if (!scatter_run(a, j, &so, &d)) continue;
      const cudaError_t e = cudaMemcpyAsync(d, a.src + so, bytes, cudaMemcpyHostToDevice, stream);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
  const uint64_t total = scatter_threads(a);
  scatter_kernel<<<blocks_for(total), kThreads, 0, stream>>>(a, total);
  return launched();
}

cudaError_t block_scores(const ScoreArgs& a, cudaStream_t stream) {
  if (!a.r || !a.out || a.n > a.C || (a.kind == kScoreHamming ? !a.code : (!a.q || !dtype_bytes(a.dtype))))
    return cudaErrorInvalidValue;
  if (a.S == 0 || a.n == 0) return cudaSuccess;
  scores_kernel<<<blocks_for(uint64_t(a.S) * a.n), kThreads, 0, stream>>>(a);
  return launched();
}

cudaError_t sign_hash(const SignHashArgs& a, cudaStream_t stream) {
  if (!a.q || !a.P || !a.code || a.B == 0 || a.B % 8) return cudaErrorInvalidValue;
  if (a.S == 0) return cudaSuccess;
  sign_hash_kernel<<<blocks_for(uint64_t(a.S) * (a.B / 8)), kThreads, 0, stream>>>(a);
  return launched();
}

cudaError_t select_topk(const SelectArgs& a, cudaStream_t stream) {
  if (!a.score || !a.mark || (a.idx && a.idx_cap == 0)) return cudaErrorInvalidValue;
  if (a.S == 0 || a.n == 0) return cudaSuccess;
  topk_kernel<<<set_blocks(a.S), 32 * kSetsPerBlock, 0, stream>>>(a);
  return launched();
}

cudaError_t select_psa(const SelectArgs& a, cudaStream_t stream) {
  if (!a.score || !a.mark || (a.idx && a.idx_cap == 0)) return cudaErrorInvalidValue;
  if (a.S == 0 || a.n == 0) return cudaSuccess;
  psa_kernel<<<set_blocks(a.S), 32 * kSetsPerBlock, 0, stream>>>(a);
  return launched();
}

cudaError_t score_select_topk(const ScoreArgs& sc, const SelectArgs& sel, cudaStream_t stream) {
  if (sc.out != sel.score || sc.S != sel.S || sc.n != sel.n) return cudaErrorInvalidValue;
  if (!sc.r || !sc.out || !sel.mark || sc.n > sc.C || (sc.kind == kScoreHamming ? !sc.code : !sc.q))
    return cudaErrorInvalidValue;
  if (sc.S == 0 || sc.n == 0) return cudaSuccess;
  score_topk_kernel<<<set_blocks(sc.S), 32 * kSetsPerBlock, 0, stream>>>(sc, sel);
  return launched();
}

cudaError_t rope_shift(const RopeShiftArgs& a, cudaStream_t stream) {
  if (!a.keys || a.D == 0 || a.D % 2 || a.D / 2 > kMaxRopePairs || !dtype_bytes(a.dtype) ||
      a.token_stride < uint64_t(a.n_heads) * a.D)
    return cudaErrorInvalidValue;
  const uint64_t total = a.n_tokens * a.n_heads * (a.D / 2);
  if (total == 0) return cudaSuccess;
  rope_kernel<<<blocks_for(total), kThreads, 0, stream>>>(a);
  return launched();
}

}  // namespace ucm::kernels
