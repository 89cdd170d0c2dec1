// cmd/migrate_cmd.h: `ucm migrate SRC DST [--namespace NAME] [--dtype bf16|fp16]`,
//                `ucm migrate STORE --upgrade`.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "cli_common.h"

namespace ucm::cli {

struct MigrateCmdOptions {
  std::string src, dst;
  admin::MigrateOptions o;  ///< --namespace, --dtype, --upgrade, --to-sharded, --shard-name
  CommonFlags common;
};
CLI::App* setup_migrate(CLI::App& app);
void run_migrate(const MigrateCmdOptions& opt);

}  // namespace ucm::cli
