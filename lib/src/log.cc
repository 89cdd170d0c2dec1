// lib/src/log.cc: see log.h.
#include "ucm/core/log.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <atomic>
#include <mutex>
#include <vector>

namespace ucm {
namespace {

// The sink of every logger libucm creates: the callback when one is set, else stderr.
class DispatchSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    LogCallback cb;
    void* user;
    {
      std::lock_guard<std::mutex> g(cb_mu());
      cb = callback();
      user = user_data();
    }
    if (!cb) {
      stderr_->log(msg);
      return;
    }
    spdlog::memory_buf_t buf;
    buf.append(msg.logger_name.begin(), msg.logger_name.end());
    buf.append(std::string_view(": "));
    buf.append(msg.payload.begin(), msg.payload.end());
    buf.push_back('\0');
    int level = 1;
    switch (msg.level) {
      case spdlog::level::trace:
      case spdlog::level::debug: level = 0; break;
      case spdlog::level::info: level = 1; break;
      case spdlog::level::warn: level = 2; break;
      default: level = 3; break;
    }
    cb(level, buf.data(), user);
  }
  void flush_() override { stderr_->flush(); }

 public:
  static std::mutex& cb_mu() {
    static std::mutex m;
    return m;
  }
  static LogCallback& callback() {
    static LogCallback cb = nullptr;
    return cb;
  }
  static void*& user_data() {
    static void* u = nullptr;
    return u;
  }

 private:
  std::shared_ptr<spdlog::sinks::stderr_color_sink_mt> stderr_ = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
};

struct Registry {
  std::mutex mu;
  std::shared_ptr<DispatchSink> sink = std::make_shared<DispatchSink>();
  std::vector<std::shared_ptr<spdlog::logger>> ours;  // loggers created here
  spdlog::level::level_enum level = spdlog::level::info;
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: loggers may log during static destruction
  return *r;
}

spdlog::level::level_enum to_spdlog(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarn: return spdlog::level::warn;
    default: return spdlog::level::err;
  }
}

}  // namespace

std::shared_ptr<spdlog::logger> named_logger(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  auto l = spdlog::get(name);
  if (!l) {
    l = std::make_shared<spdlog::logger>(name, r.sink);
    l->set_level(r.level);
    try {
      spdlog::register_logger(l);
      r.ours.push_back(l);
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

void set_log_callback(LogCallback cb, void* user_data, LogLevel min_level) {
  {
    std::lock_guard<std::mutex> g(DispatchSink::cb_mu());
    DispatchSink::callback() = cb;
    DispatchSink::user_data() = user_data;
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  r.level = cb ? to_spdlog(min_level) : spdlog::level::info;
  for (auto& l : r.ours) l->set_level(r.level);
}

}  // namespace ucm
