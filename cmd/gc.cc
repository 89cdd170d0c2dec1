// cmd/gc.cc: `ucm gc` parses arguments and calls ucm::admin::gc.
#include "gc_cmd.h"

#include <memory>

namespace ucm::cli {

namespace {

void add_gc_options(CLI::App* sub, GcCmdOptions* opt) {
  sub->add_option("STORE", opt->store, "Store directory")->required();
  sub->add_option("--max-bytes", opt->max_bytes,
                  "Evict least-recently-used blocks until payload+repr bytes <= N (10G, 512MiB)");
  sub->add_option("--max-age", opt->max_age,
                  "Evict blocks whose last access is older than this (30d, 12h, 15m)");
  sub->add_option("--namespace", opt->ns,
                  "Evict only in this namespace (--max-bytes then bounds that namespace)");
  sub->add_flag("--dry-run", opt->dry_run, "Report what would be removed; change nothing");
  sub->add_flag("--unreferenced", opt->unreferenced,
                "Evict blocks that no registered document's chain reaches");
  sub->add_flag("--verify", opt->verify,
                "Also read every block and remove those whose checksum fails");
  sub->add_option("--grace", opt->grace,
                  "Unlink retired data files this long after compaction retired them (default "
                  "60s; 0 for tests)");
  sub->add_option("--memory-budget", opt->memory_budget,
                  "Memory for gc's per-block state (default 64MiB, at least 16MiB): beyond it the state "
                  "is on disk in STORE/tmp, so gc's memory does not grow with the store");
  sub->add_option("--lease-ttl", opt->lease_ttl,
                  "Sharded stores: the gc lease lasts this long without renewal (default 60s); a gc "
                  "killed on one node is taken over by another after it");
  sub->add_option("--lease-wait", opt->lease_wait,
                  "Sharded stores: wait this long for another gc's lease (default 0: exit 4 at once)");
  sub->add_option("--writer-wait", opt->writer_wait,
                  "When a live process holds the writer lock (a server saving to the store, or a shard's "
                  "writer): plan read-only, hand the removals to that writer (it applies them at its next "
                  "heartbeat) and wait this long for its answer (default 30s; 0: no hand-off, exit 4 as busy)");
  sub->add_option("--config", opt->config, "YAML store settings; its gc: section gives defaults")
      ->check(CLI::ExistingFile);
}

}  // namespace

void run_gc(const GcCmdOptions& opt) {
  admin::GcOptions o;
  admin::GcReport rep;
  auto check = [&](const Status& st) {
    if (!st.ok()) finish("gc", opt.common, st, rep, false);
  };
  if (!opt.config.empty()) {
    admin::StoreConfig cfg;
    check(admin::load_config(opt.config, &cfg));
    o.max_bytes = cfg.gc_max_bytes;
    o.max_age_ms = cfg.gc_max_age_ms;
    o.grace_ms = cfg.gc_grace_ms;
    o.compact_dead_ratio = cfg.gc_compact_dead_ratio;
  }
  check(parse_option(admin::parse_bytes, "--max-bytes", opt.max_bytes, &o.max_bytes));
  check(parse_option(admin::parse_duration, "--max-age", opt.max_age, &o.max_age_ms));
  check(parse_option(admin::parse_duration, "--grace", opt.grace, &o.grace_ms));
  check(parse_option(admin::parse_bytes, "--memory-budget", opt.memory_budget, &o.memory_budget));
  if (!opt.memory_budget.empty() && o.memory_budget < (16ull << 20))
    check(Status::InvalidArgument("--memory-budget: at least 16MiB"));
  check(parse_option(admin::parse_duration, "--lease-ttl", opt.lease_ttl, &o.lease_ttl_ms));
  if (!opt.lease_ttl.empty() && o.lease_ttl_ms < 1000) check(Status::InvalidArgument("--lease-ttl: at least 1s"));
  check(parse_option(admin::parse_duration, "--lease-wait", opt.lease_wait, &o.lease_wait_ms));
  check(parse_option(admin::parse_duration, "--writer-wait", opt.writer_wait, &o.writer_wait_ms));
  o.ns = opt.ns;
  o.dry_run = opt.dry_run;
  o.unreferenced = opt.unreferenced;
  o.verify = opt.verify;
  o.progress = make_progress("gc", opt.common);
  Status st = admin::gc(opt.store, o, &rep);
  // A live writer that did not answer: the report says what was planned and asked, beside the error.
  finish("gc", opt.common, st, rep, st.ok() || rep.live_writer);
}

CLI::App* setup_gc(CLI::App& app) {
  return add_command(app, "gc", run_gc, add_gc_options,
                     "Merge access logs, drop corrupt and orphan blocks, evict LRU / old / unreferenced blocks, "
                     "compact data files (takes the writer lock, or hands the removals to a live writer; safe while "
                     "readers load)");
}

}  // namespace ucm::cli
