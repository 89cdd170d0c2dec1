// cmd/sglang_pages_cmd.h: `ucm sglang-pages STORE --page-size P [--namespace NS]`: builds (or
// rebuilds) a namespace's SGLang page alias table (store_v1.md §12.1; ucm/sglang_pages.h), so
// SGLang servers (the ucm.sglang HiCache backend) find the stored blocks by their page keys.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "cli_common.h"

namespace ucm::cli {

struct SglangPagesCmdOptions {
  std::string store;
  std::string ns;
  uint32_t page_size = 0;
  CommonFlags common;
};
CLI::App* setup_sglang_pages(CLI::App& app);
void run_sglang_pages(const SglangPagesCmdOptions& opt);

}  // namespace ucm::cli
