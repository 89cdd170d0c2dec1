// lib/src/log.cc: see log.h.
#include "lib/src/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <mutex>

namespace ucm {

std::shared_ptr<spdlog::logger> named_logger(const std::string& name) {
  static std::mutex mu;
  std::lock_guard<std::mutex> g(mu);
  auto l = spdlog::get(name);
  if (!l) {
    try {
      l = spdlog::stderr_color_mt(name);
    } catch (const spdlog::spdlog_ex&) {  // registered meanwhile by the application
      l = spdlog::get(name);
    }
  }
  return l;
}

spdlog::logger& log() {
  static const std::shared_ptr<spdlog::logger> l = named_logger("ucm");
  return *l;
}

}  // namespace ucm
