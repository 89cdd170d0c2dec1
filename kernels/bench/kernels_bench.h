// kernels/bench/kernels_bench.h: `ucm bench kernels`: the CUDA kernels of kernels/ against the
// copy each must keep up with, measured in the same run on the same device (docs/benchmarks.md).
//  - paged scatter (one load's layers, pinned staging -> device paged cache) against one
//    cudaMemcpyAsync host-to-device of the same bytes: whole blocks (the copy path), a TP-4 head
//    range and a small-page model (the gather kernel); target >= 0.8x; and the first and last
//    with the other path forced (no target: they tell where kMinCopyRunBytes belongs);
//  - scores + top-k (R0 dot, R1 bound, R4 Hamming fused with top-k and the windows) against a
//    device-to-device copy of the representations they read (>= 8 MiB); target >= 0.7x.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ucm/status.h"

namespace ucm::kernels::bench {

struct KernelsBenchOptions {
  int device = 0;
  uint32_t layers = 32, kv_heads = 8, head_dim = 128, block_size = 16;  ///< Llama-3-8B's KV shape
  uint32_t blocks = 64;      ///< blocks per load (64 x 2 MiB = 128 MiB of bf16 payload)
  uint32_t tp = 4;           ///< TP degree of the head-range case
  uint32_t sets = 256;       ///< scoring: (layer, KV head) sets per request
  uint32_t repr_blocks = 256;///< scoring: blocks per set (R0 bf16 [256][256][128] = 16 MiB)
  uint32_t group = 4;        ///< GQA query heads per KV head
  uint32_t iters = 20;       ///< timed repetitions (median reported)
};

struct KernelsBenchReport {
  std::string device_name;
  struct Row {
    std::string name, baseline;
    double bytes = 0, ms = 0, baseline_ms = 0, target = 0;
    std::string path;
    /// Scatter cases by measurement: scatter_calibrate's best time of one layer by each path, ms.
    double calib_copies_ms = 0, calib_kernel_ms = 0;
    double ratio() const { return ms > 0 ? baseline_ms / ms : 0; }
    bool pass() const { return ratio() >= target; }
  };
  std::vector<Row> rows;
  bool all_pass() const;
  std::string to_json() const;
  std::string to_text() const;
};

/// Runs every case on `device`. NotSupported when there is no such CUDA device; IOError naming
/// the CUDA call that failed.
Status run_kernels_bench(const KernelsBenchOptions& o, KernelsBenchReport* out);

}  // namespace ucm::kernels::bench
