// cmd/inspect.h: `ucm inspect STORE [--verify] [--block HASH] [--namespace NAME] [--docs]`.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "common.h"

namespace ucm::cli {

struct InspectCmdOptions {
  std::string store;
  bool verify = false;
  std::string block;
  std::string ns;
  bool docs = false;
  std::string model;  ///< --model DIR: detokenize the ids of --block and --docs with DIR/tokenizer.json
  uint32_t threads = 8;
  CommonFlags common;
};
CLI::App* setup_inspect(CLI::App& app);
void run_inspect(const InspectCmdOptions& opt);

}  // namespace ucm::cli
