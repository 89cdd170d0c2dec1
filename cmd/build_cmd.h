// cmd/build_cmd.h: `ucm build STORE [--config FILE] [--rebuild-index]` (docs/cli.md).
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "cli_common.h"

namespace ucm::cli {

struct BuildCmdOptions {
  std::string store;
  admin::BuildOptions o;  ///< --config, --rebuild-index, --sharded
  CommonFlags common;
};
/// Adds the `build` subcommand to `app`; returns it.
CLI::App* setup_build(CLI::App& app);
/// Runs it (throws CLI::RuntimeError(exit code) on failure).
void run_build(const BuildCmdOptions& opt);

}  // namespace ucm::cli
