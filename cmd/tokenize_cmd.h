// cmd/tokenize_cmd.h: `ucm tokenize` (docs/cli.md, docs/python.md).
#pragma once
#include <CLI/CLI.hpp>

namespace ucm::cli {

/// Adds `tokenize` to `app`:
///   ucm tokenize --model DIR [--tokenizer FILE] [--template FILE] --corpus C [--corpus-suffix S]
///     [--compare IDS.jsonl] [--limit N] [--json]
/// Without --compare: one JSONL line {"id", "source", "token_ids"} per document on stdout (a
/// token-ids corpus for `ucm precompute`). With --compare: per document, same or where it differs.
/// Exit codes: docs/cli.md (6 when --compare finds a difference or a missing document).
CLI::App* setup_tokenize(CLI::App& app);

}  // namespace ucm::cli
