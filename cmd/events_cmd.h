// cmd/events_cmd.h: `ucm events STORE [--namespace NS] [--endpoint EP] [--replay-endpoint EP]
//                [--topic T] [--data-parallel-rank N] [--no-clear] [--resend-interval D] [--medium M]
//                [--poll D] [--batch-blocks N] [--buffer-batches N] [--run-for D]`: the store's blocks as vLLM KV events (ucm/kv_event_publisher.h).
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "cli_common.h"

namespace ucm::cli {

struct EventsCmdOptions {
  std::string store;
  std::string ns;
  std::string endpoint = "tcp://*:5557";
  std::string replay_endpoint = "tcp://*:5558";
  std::string topic;
  int dp_rank = 0;
  bool no_clear = false;
  std::string resend_interval = "5s";  ///< parsed with admin::parse_duration
  std::string medium;
  std::string poll = "1s";  ///< parsed with admin::parse_duration
  std::string run_for;      ///< parsed with admin::parse_duration; "" = until SIGINT / SIGTERM
  uint32_t batch_blocks = 1024;
  uint32_t buffer_batches = 10000;
  CommonFlags common;
};
CLI::App* setup_events(CLI::App& app);
void run_events(const EventsCmdOptions& opt);

}  // namespace ucm::cli
