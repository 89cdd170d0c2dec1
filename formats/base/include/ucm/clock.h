// ucm/clock.h: wall-clock time as the store records it (ms since the Unix epoch) and its text form.
#pragma once
#include <cstdint>
#include <string>

namespace ucm {

/// Milliseconds since the Unix epoch (system clock).
uint64_t now_ms();

/// Milliseconds of the monotonic clock (std::chrono::steady_clock): for deadlines and intervals
/// within one process, never stored.
int64_t steady_ms();

/// `ms` (since the epoch) as ISO 8601 UTC: "2026-11-27T01:02:03Z", or with `millis`
/// "2026-11-27T01:02:03.456Z".
std::string iso_time(uint64_t ms, bool millis = false);

}  // namespace ucm
