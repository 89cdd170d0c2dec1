// cmd/generate_cmd.h: `ucm generate` (docs/generate.md).
#pragma once
#include <CLI/CLI.hpp>

namespace ucm::cli {

/// Adds `generate` to `app`:
///   ucm generate --model DIR [--store STORE] (--prompt TEXT | --prompt-file F) [--template FILE]
///     [--max-new-tokens N] [--no-cache] [--no-recompute] [--save] [--sparse POLICY]
///     [--retrieval-config FILE] [--config PRECOMPUTE_YAML] [--namespace NAME|ID] [--ignore-eos] [--json]
CLI::App* setup_generate(CLI::App& app);

}  // namespace ucm::cli
