// cmd/bench_generate_cmd.h: `ucm bench generate` (docs/benchmarks.md, "generate").
#pragma once
#include <CLI/CLI.hpp>

namespace ucm::cli {

/// Adds `generate` to an existing `bench` subcommand:
///   ucm bench generate [--model DIR] [--store SCRATCH] [--document FILE] [--prefix 1024,4096,8192]
///     [--repeats 3] [--json]
/// TTFT with the cache against full recompute for each cached prefix length (target >= 20x at 8K).
void setup_bench_generate(CLI::App& bench);

}  // namespace ucm::cli
