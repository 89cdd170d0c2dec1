// cmd/precompute_cmd.h: `ucm precompute` (docs/precompute.md).
#pragma once
#include <CLI/CLI.hpp>

namespace ucm::cli {

/// Adds `precompute` to `app`:
///   ucm precompute --model DIR --corpus PATH --store STORE [--template FILE] [--block-size 16]
///     [--dtype bf16] [--hash-bits 128] [--dense-layers 0,1] [--limit N] [--shard I/N] [--resume]
///     [--strict] [--batch-tokens N] [--max-doc-tokens N] [--corpus-suffix .rst.txt]
///     [--namespace-name NAME] [--tokenizer FILE] [--config FILE] [--json] [--progress]
/// Options given on the command line override those of --config. Exit codes: docs/cli.md.
CLI::App* setup_precompute(CLI::App& app);

}  // namespace ucm::cli
