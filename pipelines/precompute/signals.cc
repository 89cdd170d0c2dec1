// pipelines/precompute/signals.cc: see signals.h.
#include "signals.h"

#include <atomic>

namespace ucm::precompute::detail {
namespace {
std::atomic<bool> g_stop{false};
std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int sig) {
  g_stop_signal.store(sig);
  g_stop.store(true);
  ::signal(sig, SIG_DFL);
}
}  // namespace

bool stop_requested() { return g_stop.load(); }
int stop_signal() { return g_stop_signal.load(); }

SignalScope::SignalScope(bool enable) : enabled_(enable) {
  g_stop.store(false);
  g_stop_signal.store(0);
  if (!enabled_) return;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

SignalScope::~SignalScope() {
  if (!enabled_) return;
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

}  // namespace ucm::precompute::detail
