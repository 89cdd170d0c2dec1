// cmd/eval_cmd.h: `ucm eval retrieval` (docs/retrieval.md).
#pragma once
#include <CLI/CLI.hpp>

namespace ucm::cli {

/// Adds `eval` with its subcommand `retrieval` to `app`:
///   ucm eval retrieval --store STORE [--model DIR] [--corpus DIR] [--documents a,b] [--max-documents 6]
///     [--min-context 2048] [--max-context 8192] [--queries 8] [--budgets 0.025,0.05,0.1,0.2,0.3]
///     [--taus 0.8,0.9,0.95,0.98] [--policies esa,quest,gsa,psa] [--retrieval-config FILE] [--csv FILE] [--json]
CLI::App* setup_eval(CLI::App& app);

}  // namespace ucm::cli
