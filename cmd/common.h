// cmd/common.h: helpers shared by the subcommands of the `ucm` binary.
// A subcommand's run function ends with finish(...); an error becomes CLI::RuntimeError(code),
// which main() turns into the process exit code (ucm::admin::ExitCode, docs/cli.md).
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "ucm/admin.h"
#include "ucm/status.h"

namespace ucm::cli {

/// Options every admin subcommand has.
struct CommonFlags {
  bool json = false;      ///< --json: the report as JSON on stdout
  bool progress = false;  ///< --progress: progress lines on stderr even when it is not a TTY
};
/// Adds --json and --progress to `sub`.
void add_common_flags(CLI::App* sub, CommonFlags* f);
/// Progress callback writing "ucm <cmd>: <line>" to stderr, or null when stderr is not a TTY and
/// --progress was not given. Never writes to stdout.
admin::ProgressFn make_progress(const std::string& cmd, const CommonFlags& f);

/// Prints `report` (JSON or text) on stdout when `print_report`; prints the error (if any) on
/// stderr as "ucm <cmd>: <CODE>: <message>" (with --json also as {"error": {...}} on stdout when
/// the report is not printed). Throws CLI::RuntimeError(exit_code(st)) when st is not OK.
template <class Report>
void finish(const std::string& cmd, const CommonFlags& f, const Status& st, const Report& report,
            bool print_report);

void print_error(const std::string& cmd, const CommonFlags& f, const Status& st, bool json_out);
void print_text(const std::string& s);

template <class Report>
void finish(const std::string& cmd, const CommonFlags& f, const Status& st, const Report& report,
            bool print_report) {
  if (print_report) print_text(f.json ? report.to_json() + "\n" : report.to_text());
  if (!st.ok()) {
    print_error(cmd, f, st, f.json && !print_report);
    throw CLI::RuntimeError(admin::exit_code(st));
  }
}

}  // namespace ucm::cli
