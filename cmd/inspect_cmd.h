// cmd/inspect_cmd.h: `ucm inspect STORE [--verify] [--block HASH] [--namespace NAME] [--docs]
// [--model DIR] [--audit [--sample N | --all] [--fix]]`. --audit needs libtorch: `ucm` hands it to
// ucm-torch, which registers the runner (cmd/audit.cc).
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "cli_common.h"

namespace ucm::cli {

struct InspectCmdOptions {
  std::string store;
  admin::InspectOptions o;  ///< --verify, --block, --namespace, --docs, --threads
  std::string model;  ///< --model DIR: detokenize the ids of --block and --docs with DIR/tokenizer.json
  uint32_t threads = 8;
  // --audit (ucm/audit/audit.h)
  bool audit = false;
  uint64_t sample = 64;
  bool all = false;
  bool fix = false;
  double tolerance = 0;
  uint64_t seed = 0;
  std::string device = "cpu";
  std::string compute_dtype = "fp32";
  int compute_threads = 0;
  CommonFlags common;
};
CLI::App* setup_inspect(CLI::App& app);
void run_inspect(const InspectCmdOptions& opt);
/// ucm-torch registers the --audit runner; without it --audit fails with NOT_SUPPORTED.
void set_audit_runner(void (*run)(const InspectCmdOptions&));
/// True when argv asks for `inspect ... --audit` (`ucm` then execs ucm-torch).
bool is_audit(int argc, char** argv);

}  // namespace ucm::cli
