// cmd/bench_precompute_cmd.h: `ucm bench precompute` (docs/benchmarks.md, "precompute").
#pragma once
#include <CLI/CLI.hpp>

namespace ucm::cli {

/// Adds `precompute` to an existing `bench` subcommand:
///   ucm bench precompute [--model DIR] [--corpus PATH] [--docs N] [--json] ...
/// Times bare prefill (LlamaModel::forward on the batches precompute builds) and a full precompute
/// of the same documents into a temporary store, and prints the throughput ratio (target >= 0.9).
void setup_bench_precompute(CLI::App& bench);

}  // namespace ucm::cli
