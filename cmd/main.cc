// cmd/main.cc: the `ucm` binary. Each top-level subcommand lives in its own file pair (CLI11's
// subcom_in_files pattern) and is registered by one line in kSubcommands below; bench's are
// added by setup_bench; the libtorch ones are also listed in kTorchCommands (docs/cli.md).
#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>
#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cli_common.h"

#include "build_cmd.h"
#include "ucm/format/format.h"
#include "gc_cmd.h"
#include "inspect_cmd.h"
#include "events_cmd.h"
#include "sglang_pages_cmd.h"
#include "migrate_cmd.h"
#include "tokenize_cmd.h"
#include "torch_commands.h"
#include "ucm/admin.h"
#include "ucm/version.h"

#if UCM_CLI_HAVE_BENCH
#include "bench_cmd.h"
#endif
#if UCM_CLI_HAVE_PRECOMPUTE
#include "audit_cmd.h"    // inspect --audit (pipelines/audit)
#include "ucm/model/cpu_runtime.h"  // ucm_model: restart_with_blas_core, cxx_runtime_conflict
#include "precompute_cmd.h"
#endif
#if UCM_CLI_HAVE_GENERATE
#include "eval_cmd.h"
#include "generate_cmd.h"
#endif

#ifndef UCM_HAVE_TORCH
#define UCM_HAVE_TORCH 0
#endif
#ifndef UCM_HAVE_CUDA
#define UCM_HAVE_CUDA 0
#endif

namespace {

using SetupFn = CLI::App* (*)(CLI::App&);

/// One row per subcommand. setup == nullptr: not compiled into this build; the row is still
/// listed in --help with its description and `missing` (why), and running it exits 1.
struct SubcommandEntry {
  const char* name;
  SetupFn setup;
  const char* description;  ///< only used when setup == nullptr
  const char* missing;
};

const SubcommandEntry kSubcommands[] = {
    {"build", ucm::cli::setup_build, nullptr, nullptr},
    {"inspect", ucm::cli::setup_inspect, nullptr, nullptr},
    {"gc", ucm::cli::setup_gc, nullptr, nullptr},
    {"migrate", ucm::cli::setup_migrate, nullptr, nullptr},
    {"events", ucm::cli::setup_events, nullptr, nullptr},
    {"sglang-pages", ucm::cli::setup_sglang_pages, nullptr, nullptr},
    {"tokenize", ucm::cli::setup_tokenize, nullptr, nullptr},
#if UCM_CLI_HAVE_BENCH
    {"bench", ucm::cli::setup_bench, nullptr, nullptr},
#else
    {"bench", nullptr, "Measure ucm on this machine", "needs lib/bench"},
#endif
#if UCM_CLI_HAVE_PRECOMPUTE
    {"precompute", ucm::cli::setup_precompute, nullptr, nullptr},
#endif
#if UCM_CLI_HAVE_GENERATE
    {"generate", ucm::cli::setup_generate, nullptr, nullptr},
    {"eval", ucm::cli::setup_eval, nullptr, nullptr},
#endif
};

constexpr const char* kFooter =
    "Exit codes: 0 ok; 1 error (stderr says what was wrong and what to do); 2 usage error; "
    "3 corruption found (inspect --verify); 4 store busy (locked by another writer); "
    "5 store format version newer than this ucm supports; 6 token ids differ (tokenize --compare).\n"
    "Every subcommand accepts --json (report on stdout as JSON) and --progress (progress lines "
    "on stderr even when it is not a terminal). Reference: docs/cli.md.";

std::string version_text() {
  std::string s = "ucm " UCM_VERSION_STRING "\n";
  // The same newest version as ucm_format_version(): a single store's, and a sharded root's.
  s += "store format version " + std::to_string(std::max(ucm::fmt::kFormatVersion, ucm::fmt::kShardedFormatVersion)) +
       " (single stores " +
       std::to_string(ucm::fmt::kFormatVersion) + ", sharded roots " + std::to_string(ucm::fmt::kShardedFormatVersion) +
       "; reads 1 and up)\n";
  s += std::string("libtorch support: ") + (UCM_HAVE_TORCH ? "yes" : "no") + "\n";
  s += std::string("CUDA support: ") + (UCM_HAVE_CUDA ? "yes" : "no") + "\n";
  return s;
}

bool wants_json(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--json") == 0) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
#if UCM_CLI_HAVE_PRECOMPUTE
  // ucm-torch: OpenBLAS's fp32 GEMM kernels for this CPU (cpu_runtime.h; a re-exec when it fell
  // back to SSE3 kernels, or when the environment's OPENBLAS_CORETYPE names AVX2 kernels on an
  // AVX-512 CPU, unless UCM_BLAS_CORE=keep).
  ucm::model::restart_with_blas_core(argv, true);
  // Activations reuse freed pages (page faults were 3.5% of an fp32 prefill: cpu_runtime.h).
  // UCM_MALLOC_DEFAULTS=1 leaves glibc's defaults (before/after runs).
  if (const char* d = std::getenv("UCM_MALLOC_DEFAULTS"); !d || !*d || std::strcmp(d, "0") == 0)
    ucm::model::keep_freed_pages();
  ucm::cli::set_audit_runner(ucm::cli::run_audit_command);
#endif
  // stdout carries only reports (text, or one JSON object with --json); every message of the
  // tools and the library goes to stderr. SPDLOG_LEVEL=debug (etc.) changes the level.
  spdlog::set_default_logger(spdlog::stderr_color_mt("ucm"));
  spdlog::cfg::load_env_levels();
#if UCM_CLI_HAVE_PRECOMPUTE
  // A libtorch that exports its own std::filesystem, found before libstdc++'s: a clear refusal
  // rather than a SIGSEGV in the middle of a command (compute.h).
  if (const std::string conflict = ucm::model::cxx_runtime_conflict(); !conflict.empty()) {
    const ucm::Status st = ucm::Status::Internal(conflict);
    if (wants_json(argc, argv)) ucm::cli::print_json("", st);
    ucm::cli::print_error("ucm-torch", st);
    return ucm::admin::kExitError;
  }
#endif
#if UCM_CLI_DELEGATE_TORCH
  // precompute, generate, eval, bench precompute / generate: the libtorch binary runs them.
  if (ucm::cli::torch_command_of(argc, argv) || ucm::cli::is_audit(argc, argv))
    return ucm::cli::exec_torch_binary(UCM_CLI_TORCH_BINARY, argc, argv);
#endif
  const bool json = wants_json(argc, argv);
  CLI::App app{"ucm: a durable, indexed, checksummed store for LLM KV caches", "ucm"};
  app.footer(kFooter);
  app.require_subcommand(0, 1);
  bool show_version = false;
  app.add_flag("-V,--version", show_version,
               "Print the ucm version, store format version and built-in CUDA / libtorch support");
  for (const auto& e : kSubcommands) {
    if (e.setup) {
      e.setup(app);
      continue;
    }
    std::string desc = std::string(e.description) + " (not built: " + e.missing + ")";
    CLI::App* sub = app.add_subcommand(e.name, desc);
    sub->allow_extras();
    std::string name = e.name, missing = e.missing;
    sub->callback([name, missing, json] {
      const ucm::Status st = ucm::Status::NotSupported("this ucm was built without it (" + missing +
                                                       "); rebuild ucm with that support");
      if (json) ucm::cli::print_json("", st);
      ucm::cli::print_error(name, st);
      throw CLI::RuntimeError(ucm::admin::kExitError);
    });
  }

#if !UCM_CLI_HAVE_GENERATE
  ucm::cli::add_torch_placeholders(app, "");  // run by ucm-torch, or not built
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // the subcommand already printed its message
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    if (json) {
      // A usage error still gives one JSON object on stdout; its exit_code is the process's.
      nlohmann::ordered_json j;
      j["error"] = {{"code", "USAGE"}, {"message", e.what()}, {"exit_code", ucm::admin::kExitUsage}};
      ucm::cli::print_text(j.dump(2) + "\n");
    }
    return ucm::admin::kExitUsage;
  }
  if (show_version) {
    std::fputs(version_text().c_str(), stdout);
    return 0;
  }
  if (app.get_subcommands().empty()) {
    std::fputs(app.help().c_str(), stderr);
    ucm::cli::messages().error("ucm: a subcommand is required");
    return ucm::admin::kExitUsage;
  }
  return 0;
}
