// cmd/bench_cmd.h: the `ucm bench` command group (docs/benchmarks.md).
#pragma once
#include <CLI/CLI.hpp>

namespace ucm::cli {

/// Adds `bench` with its subcommands (`store`, `retrieval`, and `precompute` when built with
/// UCM_CLI_HAVE_BENCH_PRECOMPUTE) to `app`; returns the `bench` subcommand.
CLI::App* setup_bench(CLI::App& app);

/// Adds `store` to an existing `bench` subcommand:
///   ucm bench store [--store DIR] [--keep] [--blocks N] [--block-bytes B] [--json] [--progress] ...
/// Exit codes: 0 when the run completed (targets met or not: see the report, or pass
/// --fail-on-miss to exit 1 on a missed target), 1 on an error, 2 on bad usage.
void setup_bench_store(CLI::App& bench);

/// Adds `retrieval` to an existing `bench` subcommand:
///   ucm bench retrieval [--contexts N...] [--layers L] [--kv-heads H] [--q-heads Q] [--head-dim D]
///                       [--block-size T] [--hash-bits B] [--seconds S] [--json] ...
/// Exit codes as `bench store`.
void setup_bench_retrieval(CLI::App& bench);

}  // namespace ucm::cli
