// formats/base/helpers.cc: hex (ucm/hex.h), comma lists (ucm/strings.h), clock (ucm/clock.h) and
// process checks (ucm/process.h).
#include <signal.h>
#include <sys/types.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "ucm/clock.h"
#include "ucm/hex.h"
#include "ucm/process.h"
#include "ucm/strings.h"

namespace ucm {

std::string hex_encode(const void* data, size_t n) {
  static const char* d = "0123456789abcdef";
  const auto* p = static_cast<const uint8_t*>(data);
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = d[p[i] >> 4];
    s[2 * i + 1] = d[p[i] & 15];
  }
  return s;
}

std::vector<std::string> split_comma(std::string_view s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t e = s.find(',', pos);
    if (e == std::string_view::npos) e = s.size();
    out.emplace_back(s.substr(pos, e - pos));
    pos = e + 1;
  }
  return out;
}

uint64_t now_ms() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string iso_time(uint64_t ms, bool millis) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  if (millis)
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900, tm.tm_mon + 1,
                  tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<unsigned>(ms % 1000));
  else
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

bool pid_alive(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH); }

}  // namespace ucm
