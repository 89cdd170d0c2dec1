// lib/src/log.h: libucm's loggers. Internal.
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

}  // namespace ucm
