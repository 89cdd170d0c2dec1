// cmd/gc_cmd.h: `ucm gc STORE [--max-bytes N] [--max-age D] [--namespace NAME] [--dry-run]
//                        [--unreferenced] [--verify] [--grace D] [--config FILE]
//                        [--lease-ttl D] [--lease-wait D]`.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "cli_common.h"

namespace ucm::cli {

struct GcCmdOptions {
  std::string store;
  std::string max_bytes, max_age, grace;  ///< parsed with admin::parse_bytes / parse_duration
  std::string memory_budget;               ///< parsed with admin::parse_bytes
  std::string lease_ttl, lease_wait;       ///< sharded stores; parsed with admin::parse_duration
  std::string writer_wait;  ///< --writer-wait (store_v1.md §11.5)
  std::string ns;
  std::string config;
  bool dry_run = false;
  bool unreferenced = false;
  bool verify = false;
  CommonFlags common;
};
CLI::App* setup_gc(CLI::App& app);
void run_gc(const GcCmdOptions& opt);

}  // namespace ucm::cli
