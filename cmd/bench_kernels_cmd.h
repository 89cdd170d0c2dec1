// cmd/bench_kernels_cmd.h: `ucm bench kernels` (docs/benchmarks.md, "kernels").
#pragma once
#include <CLI/CLI.hpp>

namespace ucm::cli {

/// Adds `kernels` to an existing `bench` subcommand:
///   ucm bench kernels [--device N] [--blocks N] [--layers N] [--kv-heads N] [--head-dim N] [--tp N]
///                     [--sets N] [--repr-blocks N] [--iters N] [--json] [--fail-on-miss]
/// Exit codes as `bench store`; 7 (not supported) without CUDA in this build or without the device.
void setup_bench_kernels(CLI::App& bench);

}  // namespace ucm::cli
