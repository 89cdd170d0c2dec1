// bench/retrieval_bench.h: `ucm bench retrieval` as a library call (docs/benchmarks.md,
// "retrieval").
//
// Synthetic representations of one request, shaped like the default model (SmolLM2-135M: L = 30
// layers, H = 3 KV heads, 9 query heads, D = 64, T = 16, B = 128, bf16 R0/R1), for each context
// length, laid out as ucm_store_load_repr fills them. For each policy (ESA, QUEST, GSA, PSA) it
// measures, per layer per decode step:
//   select  ucm_retriever_select's work (ucm::retrieval::Retriever::select: query conversion,
//           scoring, GQA reduction, windows, budget, top-k / threshold), defaults
//           (configs/retrieval.yaml) except honor_dense_layers = 0 (every layer is sparse);
//   scan    the scoring kernel alone over every KV head's blocks (lib/src/retrieval/kernels.h);
// and GB/s of representation bytes scanned (R0 for ESA, R1 for QUEST and PSA, R4 for GSA; one
// layer: H * C * section bytes), against memcpy bandwidth measured in the same run.
// Target: ESA and QUEST scan >= 0.5 x memcpy at every context length.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ucm/bench/common.h"
#include "ucm/status.h"

namespace ucm::bench {

struct RetrievalBenchOptions {
  /// Context lengths in blocks (8K and 128K tokens of 16-token blocks).
  std::vector<uint64_t> contexts = {512, 8192};
  uint32_t layers = 30, kv_heads = 3, q_heads = 9, head_dim = 64, block_size = 16, hash_bits = 128;
  /// Minimum measuring time per (context, policy, select / scan); at least 3 decode steps.
  double min_seconds = 0.5;
  /// Bytes of the memcpy reference (copied src -> dst, best of 5).
  uint64_t memcpy_bytes = 256ull << 20;
  uint64_t seed = 1;
  /// Progress lines (stderr in the CLI). Null = silent.
  std::function<void(const std::string&)> progress;
};

struct RetrievalFigure {
  std::string policy;       ///< "esa", "quest", "gsa", "psa"
  uint64_t blocks = 0;      ///< context length in blocks
  uint64_t layer_bytes = 0; ///< representation bytes scanned per layer
  uint64_t steps = 0;       ///< decode steps timed (select)
  double select_us = 0;     ///< per layer per decode step
  double scan_us = 0;       ///< scoring kernel alone, per layer
  double mean_selected = 0; ///< blocks per set, mean over the timed selects
  double select_gbps() const { return select_us > 0 ? layer_bytes / select_us / 1e3 : 0; }
  double scan_gbps() const { return scan_us > 0 ? layer_bytes / scan_us / 1e3 : 0; }
};

struct RetrievalBenchReport : BenchTargets {
  RetrievalBenchOptions options;
  std::string isa;          ///< the kernels' build picked at load time ("x86-64-v4", ...)
  double memcpy_gbps = 0;   ///< bytes copied per second / 1e9
  std::vector<RetrievalFigure> figures;
  /// Every figure and target as one JSON object (units in key names: _us, _gbps, _bytes).
  std::string to_json() const;
  /// Human table.
  std::string to_text() const;
};

/// Runs the benchmark. InvalidArgument for bad shapes (q_heads not a multiple of kv_heads,
/// hash_bits not a multiple of 8, no context); a missed target is not an error (report->targets).
Status run_retrieval_bench(const RetrievalBenchOptions& opts, RetrievalBenchReport* report);

}  // namespace ucm::bench
