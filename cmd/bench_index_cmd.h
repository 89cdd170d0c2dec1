// cmd/bench_index_cmd.h: `ucm bench index` (docs/benchmarks.md, "index").
#pragma once
#include <CLI/CLI.hpp>

namespace ucm::cli {

/// Adds `index` to an existing `bench` subcommand:
///   ucm bench index [--store DIR] [--keep] [--blocks N] [--replay N] [--lookup-seconds S]
///                   [--gc-fraction F] [--gc-arg ARG]... [--json] [--progress] [--fail-on-miss]
/// Exit codes as `bench store`.
void setup_bench_index(CLI::App& bench);

}  // namespace ucm::cli
