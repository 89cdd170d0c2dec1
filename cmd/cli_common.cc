// cmd/cli_common.cc: see cli_common.h.
#include "cli_common.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

namespace ucm::cli {

spdlog::logger& messages() {
  static const std::shared_ptr<spdlog::logger> log = [] {
    auto l = std::make_shared<spdlog::logger>("ucm-cli", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("%v");
    l->set_level(spdlog::level::info);
    l->flush_on(spdlog::level::info);
    return l;
  }();
  return *log;
}

void add_common_flags(CLI::App* sub, CommonFlags* f) {
  sub->add_flag("--json", f->json, "Print the report as JSON on stdout");
  sub->add_flag("--progress", f->progress,
                "Print progress lines on stderr even when stderr is not a terminal");
}

admin::ProgressFn make_progress(const std::string& cmd, const CommonFlags& f) {
  if (!f.progress && !::isatty(STDERR_FILENO)) return nullptr;
  return [cmd](const std::string& line) {
    messages().info("ucm {}: {}", cmd, line);
  };
}

void print_text(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

void print_error(const std::string& cmd, const Status& st) {
  messages().error("ucm {}: {}", cmd, st.ToString());
}

void print_json(const std::string& report_json, const Status& st) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!report_json.empty()) j = nlohmann::ordered_json::parse(report_json);
  if (!st.ok())
    j["error"] = {{"code", code_name(st.code())}, {"message", st.message()}, {"exit_code", admin::exit_code(st)}};
  print_text(j.dump(2) + "\n");
}

}  // namespace ucm::cli
