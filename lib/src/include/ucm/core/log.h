// ucm/core/log.h: libucm's loggers. Internal.
// The library never writes to stdout (a server's stdout may be its protocol): its messages go to
// spdlog loggers named "ucm" (the store) and "ucm.rocksdb" (RocksDB's info log), which write to
// stderr unless the application registered loggers of those names first.
#pragma once
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace ucm {

/// The logger `name`: the application's, if it registered one of that name, else a new stderr
/// logger registered under it. Thread-safe.
std::shared_ptr<spdlog::logger> named_logger(const std::string& name);
/// named_logger("ucm").
spdlog::logger& log();

/// Levels of the C ABI's log callback (UCM_LOG_*).
enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };
using LogCallback = void (*)(int level, const char* message, void* user_data);
/// Routes the messages of the loggers libucm created (named_logger) to cb, at min_level and
/// above; cb == nullptr restores stderr (at info). Loggers the application registered itself
/// are left alone.
void set_log_callback(LogCallback cb, void* user_data, LogLevel min_level);

}  // namespace ucm
