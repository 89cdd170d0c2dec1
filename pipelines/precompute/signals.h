// pipelines/precompute/signals.h: the first SIGINT / SIGTERM stops reading (the pipeline
// finishes what is in flight); a second one kills (the default action). Internal.
#pragma once
#include <signal.h>

namespace ucm::precompute::detail {

/// True once a stop signal arrived in the current scope.
bool stop_requested();
/// The signal that stopped the run (2, 15), 0 = none.
int stop_signal();

/// Installs the handlers for its lifetime (when `enable`), and resets the stop state.
class SignalScope {
 public:
  explicit SignalScope(bool enable);
  ~SignalScope();
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

 private:
  bool enabled_;
  struct sigaction old_int_ {}, old_term_ {};
};

}  // namespace ucm::precompute::detail
