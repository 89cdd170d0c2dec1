// ucm/process.h: process checks (lock files and reader leases name their owner's pid).
#pragma once

namespace ucm {

/// Whether a process with this pid exists on this host: kill(pid, 0) succeeds or fails with
/// anything but ESRCH (EPERM: it exists under another user). false for pid <= 0.
bool pid_alive(long pid);

}  // namespace ucm
