// cmd/cli_common.h: helpers shared by the subcommands of the `ucm` binary.
// A subcommand's run function ends with finish(...); an error becomes CLI::RuntimeError(code),
// which main() turns into the process exit code (ucm::admin::ExitCode, docs/cli.md).
#pragma once
#include <CLI/CLI.hpp>
#include <spdlog/logger.h>

#include <memory>
#include <string>
#include <type_traits>

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

/// Adds subcommand `name` to `app`: its options, bound to a new Options by `add_options`, then
/// --json and --progress (Options::common), and a callback running `run` on them; returns it.
template <class Options>
CLI::App* add_command(CLI::App& app, const std::string& name, void (*run)(const Options&),
                      std::type_identity_t<void (*)(CLI::App*, Options*)> add_options, const std::string& description) {
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(name, description);
  add_options(sub, opt.get());
  add_common_flags(sub, &opt->common);
  sub->callback([opt, run] { run(*opt); });
  return sub;
}

/// Adds `ucm bench <name>` to `bench`: its options, bound to a new Options by `add_options`, then
/// --fail-on-miss, --json and --progress. Its callback sets Options::progress where there is one,
/// runs `run`, prints the report, and with --fail-on-miss exits 1 when a target is missed
/// (!Report::all_pass()).
template <class Options, class Report>
void add_bench_command(CLI::App& bench, const std::string& name, Status (*run)(const Options&, Report*),
                       std::type_identity_t<void (*)(CLI::App*, Options*)> add_options,
                       const std::string& description) {
  struct Args {
    Options o;
    CommonFlags common;
    bool fail_on_miss = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = bench.add_subcommand(name, description);
  add_options(c, &a->o);
  c->add_flag("--fail-on-miss", a->fail_on_miss, "Exit 1 when a target is missed");
  add_common_flags(c, &a->common);
  c->callback([a, run, cmd = "bench " + name] {
    if constexpr (requires { a->o.progress = make_progress(cmd, a->common); })
      a->o.progress = make_progress(cmd, a->common);
    Report rep;
    const Status s = run(a->o, &rep);
    finish(cmd, a->common, s, rep, s.ok());
    if (a->fail_on_miss && !rep.all_pass()) throw CLI::RuntimeError(admin::kExitError);
  });
}

/// Option `name`, a size or a duration in ms (`parse`: admin::parse_bytes or parse_duration), into
/// *out (uint64_t or std::optional<uint64_t>): an empty value leaves *out as it is (unless
/// `required`), one that does not parse is InvalidArgument("<name>: <why>").
template <class Out>
Status parse_option(Status (*parse)(const std::string&, uint64_t*), const std::string& name,
                    const std::string& value, Out* out, bool required = false) {
  if (value.empty() && !required) return Status::OK();
  uint64_t v = 0;
  const Status st = parse(value, &v);
  if (!st.ok()) return Status::InvalidArgument(name + ": " + st.message());
  *out = v;
  return Status::OK();
}

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
