// cmd/common.cc: output helpers of the `ucm` binary.
#include "common.h"

#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

namespace ucm::cli {

void add_common_flags(CLI::App* sub, CommonFlags* f) {
  sub->add_flag("--json", f->json, "Print the report as JSON on stdout");
  sub->add_flag("--progress", f->progress,
                "Print progress lines on stderr even when stderr is not a terminal");
}

admin::ProgressFn make_progress(const std::string& cmd, const CommonFlags& f) {
  if (!f.progress && !::isatty(STDERR_FILENO)) return nullptr;
  return [cmd](const std::string& line) {
    std::fprintf(stderr, "ucm %s: %s\n", cmd.c_str(), line.c_str());
    std::fflush(stderr);
  };
}

void print_text(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

void print_error(const std::string& cmd, const Status& st) {
  std::fprintf(stderr, "ucm %s: %s\n", cmd.c_str(), st.ToString().c_str());
  std::fflush(stderr);
}

void print_json(const std::string& report_json, const Status& st) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!report_json.empty()) j = nlohmann::ordered_json::parse(report_json);
  if (!st.ok())
    j["error"] = {{"code", code_name(st.code())}, {"message", st.message()}, {"exit_code", admin::exit_code(st)}};
  print_text(j.dump(2) + "\n");
}

}  // namespace ucm::cli
