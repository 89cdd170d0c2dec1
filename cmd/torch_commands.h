// cmd/torch_commands.h: the subcommands that need libtorch (precompute, generate, eval, bench
// precompute, bench generate). They run in a second binary, `ucm-torch` (build:
// BUILD/libexec/ucm/ucm-torch; installed: PREFIX/libexec/ucm/ucm-torch), so that `ucm` itself
// never maps libtorch: libtorch and its dependencies cost ~170 MiB of RSS (60 MiB anonymous)
// before any work, which `ucm gc` from cron would pay for nothing (docs/benchmarks.md "index").
// `ucm` execs `ucm-torch` for those subcommands with the same arguments (same process id, same
// stdout / stderr / exit code); its --help lists them with the descriptions below.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

namespace ucm::cli {

struct TorchCommand {
  const char* parent;       ///< "" (top level) or "bench"
  const char* name;         ///< "precompute", "generate", "eval"
  const char* description;  ///< the --help line, shared by the real subcommand and its placeholder
};

/// The description of torch command `name` under `parent` ("" or "bench"); "" if none.
const char* torch_description(const std::string& parent, const std::string& name);

/// The torch command that argv names (its first argument not starting with '-', and for
/// "bench" the next one), or null.
const TorchCommand* torch_command_of(int argc, char** argv);

/// Replaces this process with the ucm-torch binary at `relative_path` from this binary's
/// directory, with argv. Returns only when that fails: the exit code after an error on stderr
/// (and one JSON object on stdout when argv has --json).
int exec_torch_binary(const char* relative_path, int argc, char** argv);

/// Adds every torch command under `parent` ("" = the top-level app, "bench" = `bench`) to `app` as
/// a placeholder, listed in --help. In `ucm` (built with UCM_CLI_DELEGATE_TORCH=1) main() has
/// exec'd ucm-torch before parsing, so a placeholder never runs; in a binary without libtorch
/// (ucm-admin, or ucm built without it) its --help line says "(not built: needs libtorch)" and
/// running it fails with NOT_SUPPORTED (exit 1).
void add_torch_placeholders(CLI::App& app, const std::string& parent);

}  // namespace ucm::cli
