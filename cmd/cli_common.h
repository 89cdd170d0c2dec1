// cmd/cli_common.h: helpers shared by the subcommands of the `ucm` binary.
// A subcommand's run function ends with finish(...); an error becomes CLI::RuntimeError(code),
// which main() turns into the process exit code (ucm::admin::ExitCode, docs/cli.md).
#pragma once
#include <CLI/CLI.hpp>
#include <spdlog/logger.h>

#include <string>

#include "ucm/admin.h"
#include "ucm/status.h"

namespace ucm::cli {

/// The tools' own messages (progress lines, errors) on stderr, as bare lines "ucm <cmd>: ..."
/// (docs/cli.md): a logger of its own (pattern "%v"), so that SPDLOG_LEVEL, which sets the level
/// of the library's "ucm" logger, never hides an error. stdout carries only reports.
spdlog::logger& messages();

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

/// Prints the outcome of a subcommand and throws CLI::RuntimeError(exit_code(st)) when st is not OK.
///
/// Text mode: `report` as text on stdout when `print_report`; an error goes to stderr as
/// "ucm <cmd>: <CODE>: <message>".
/// --json: stdout carries exactly one JSON object, whatever the outcome: the report, the report
/// with an "error" member ({"code", "message", "exit_code"}) when a partial report is printed
/// after an error, or {"error": {...}} alone. The error is also written to stderr.
template <class Report>
void finish(const std::string& cmd, const CommonFlags& f, const Status& st, const Report& report,
            bool print_report);

/// Prints `st` on stderr as "ucm <cmd>: <CODE>: <message>".
void print_error(const std::string& cmd, const Status& st);
/// --json: prints `report_json` (or {} when empty) with an "error" member for `st` added when
/// st is not OK, as one JSON object on stdout.
void print_json(const std::string& report_json, const Status& st);
void print_text(const std::string& s);

template <class Report>
void finish(const std::string& cmd, const CommonFlags& f, const Status& st, const Report& report,
            bool print_report) {
  if (f.json)
    print_json(print_report ? report.to_json() : std::string(), st);
  else if (print_report)
    print_text(report.to_text());
  if (!st.ok()) {
    print_error(cmd, st);
    throw CLI::RuntimeError(admin::exit_code(st));
  }
}

}  // namespace ucm::cli
