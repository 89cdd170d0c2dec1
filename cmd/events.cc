// cmd/events.cc: `ucm events` parses arguments and calls ucm::admin::publish_events.
#include "events_cmd.h"

#include <csignal>
#include <memory>

#include "ucm/kv_event_publisher.h"

namespace ucm::cli {
namespace {

std::atomic<bool> g_stop{false};
void events_stop_signal(int) { g_stop.store(true); }

void add_events_options(CLI::App* sub, EventsCmdOptions* opt) {
  sub->add_option("STORE", opt->store, "Store directory")->required();
  sub->add_option("--namespace", opt->ns, "Publish only this namespace (name or 32-hex id); default: all");
  sub->add_option("--endpoint", opt->endpoint,
                  "ZeroMQ PUB endpoint, as vLLM's --kv-events-config endpoint: bound when it holds '*' (tcp://*:0: "
                  "a free port), connected otherwise")
      ->capture_default_str();
  sub->add_option("--replay-endpoint", opt->replay_endpoint,
                  "ROUTER endpoint answering vLLM replay requests (start sequence, 8 bytes big-endian); '' = none")
      ->capture_default_str();
  sub->add_option("--topic", opt->topic,
                  "First frame of every message (vLLM's topic; default empty). llm-d's indexer subscribes to \"kv@\" "
                  "and reads kv@<pod>@<model> (docs/operations.md)");
  sub->add_option("--data-parallel-rank", opt->dp_rank,
                  "The batches' data_parallel_rank, as vLLM's publishers stamp it; -1: none (a two-field batch)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 20));
  sub->add_flag("--no-clear", opt->no_clear,
                "Do not publish AllBlocksCleared before the snapshot (a router clears a topic's whole pod on it: use "
                "this when the topic names a serving pod)");
  sub->add_option("--resend-interval", opt->resend_interval,
                  "A subscriber that connects later gets the store's blocks again, at most once per this long "
                  "(default 5s; 0: never, subscribers then rely on replay)");
  sub->add_option("--medium", opt->medium,
                  "The events' medium (default \"ucm:<store directory name>\", as the vLLM connector names it)");
  sub->add_option("--poll", opt->poll, "How often the store's journals are read (default 1s; 100ms, 5s)");
  sub->add_option("--batch-blocks", opt->batch_blocks, "Blocks per KVEventBatch message")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  sub->add_option("--buffer-batches", opt->buffer_batches,
                  "Batches kept for replay; make it hold the snapshot (blocks / batch-blocks) for late subscribers")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 30));
  sub->add_option("--run-for", opt->run_for, "Stop after this long (30s, 10m); default: until SIGINT / SIGTERM");
}

}  // namespace

void run_events(const EventsCmdOptions& opt) {
  admin::EventsOptions o;
  admin::EventsReport rep;
  uint64_t ms = 0;
  Status st = parse_option(admin::parse_duration, "--poll", opt.poll, &ms, true);
  if (st.ok()) st = parse_option(admin::parse_duration, "--run-for", opt.run_for, &o.run_for_ms);
  uint64_t resend_ms = 5000;
  if (st.ok())
    st = parse_option(admin::parse_duration, "--resend-interval", opt.resend_interval, &resend_ms, true);
  if (!st.ok()) finish("events", opt.common, st, rep, false);
  o.poll_ms = static_cast<uint32_t>(std::max<uint64_t>(ms, 10));
  o.ns = opt.ns;
  o.endpoint = opt.endpoint;
  o.replay_endpoint = opt.replay_endpoint;
  o.topic = opt.topic;
  o.data_parallel_rank = opt.dp_rank;
  o.clear_on_start = !opt.no_clear;
  o.resend_min_ms = static_cast<uint32_t>(std::min<uint64_t>(resend_ms, UINT32_MAX));
  o.medium = opt.medium;
  o.max_blocks_per_batch = opt.batch_blocks;
  o.buffer_batches = opt.buffer_batches;
  o.stop = &g_stop;
  o.progress = make_progress("events", opt.common);
  o.on_ready = [](const std::string& pub, const std::string& replay) {
    messages().info("ucm events: publishing on {}{}", pub, replay.empty() ? std::string() : ", replay on " + replay);
  };
  std::signal(SIGINT, events_stop_signal);
  std::signal(SIGTERM, events_stop_signal);
  st = admin::publish_events(opt.store, o, &rep);
  finish("events", opt.common, st, rep, st.ok() || rep.batches > 0);
}

CLI::App* setup_events(CLI::App& app) {
  return add_command(app, "events", run_events, add_events_options,
                     "Publish the store's blocks as vLLM KV events (BlockStored / BlockRemoved over ZeroMQ, vLLM's "
                     "wire format) for KV-aware routers: a snapshot, then what writers add and gc removes. Runs until "
                     "SIGINT / SIGTERM (or --run-for); read-only");
}

}  // namespace ucm::cli
