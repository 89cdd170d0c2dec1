// cmd/gc.cc: `ucm gc` parses arguments and calls ucm::admin::gc.
#include "gc_cmd.h"

#include <memory>

namespace ucm::cli {

CLI::App* setup_gc(CLI::App& app) {
  auto opt = std::make_shared<GcCmdOptions>();
  CLI::App* sub = app.add_subcommand(
      "gc", "Merge access logs, drop corrupt and orphan blocks, evict LRU / old / unreferenced "
            "blocks, compact data files (takes the writer lock, or hands the removals to a live writer; safe while "
            "readers load)");
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
  add_common_flags(sub, &opt->common);
  sub->callback([opt] { run_gc(*opt); });
  return sub;
}

void run_gc(const GcCmdOptions& opt) {
  admin::GcOptions o;
  admin::GcReport rep;
  auto fail = [&](const Status& st) { finish("gc", opt.common, st, rep, false); };
  if (!opt.config.empty()) {
    admin::StoreConfig cfg;
    Status st = admin::load_config(opt.config, &cfg);
    if (!st.ok()) fail(st);
    o.max_bytes = cfg.gc_max_bytes;
    o.max_age_ms = cfg.gc_max_age_ms;
    o.grace_ms = cfg.gc_grace_ms;
    o.compact_dead_ratio = cfg.gc_compact_dead_ratio;
  }
  if (!opt.max_bytes.empty()) {
    uint64_t v;
    Status st = admin::parse_bytes(opt.max_bytes, &v);
    if (!st.ok()) fail(Status::InvalidArgument("--max-bytes: " + st.message()));
    o.max_bytes = v;
  }
  if (!opt.max_age.empty()) {
    uint64_t v;
    Status st = admin::parse_duration(opt.max_age, &v);
    if (!st.ok()) fail(Status::InvalidArgument("--max-age: " + st.message()));
    o.max_age_ms = v;
  }
  if (!opt.grace.empty()) {
    uint64_t v;
    Status st = admin::parse_duration(opt.grace, &v);
    if (!st.ok()) fail(Status::InvalidArgument("--grace: " + st.message()));
    o.grace_ms = v;
  }
  if (!opt.memory_budget.empty()) {
    uint64_t v;
    Status st = admin::parse_bytes(opt.memory_budget, &v);
    if (!st.ok()) fail(Status::InvalidArgument("--memory-budget: " + st.message()));
    if (v < (16ull << 20)) fail(Status::InvalidArgument("--memory-budget: at least 16MiB"));
    o.memory_budget = v;
  }
  if (!opt.lease_ttl.empty()) {
    uint64_t v;
    Status st = admin::parse_duration(opt.lease_ttl, &v);
    if (!st.ok() || v < 1000) fail(Status::InvalidArgument("--lease-ttl: " + (st.ok() ? "at least 1s" : st.message())));
    o.lease_ttl_ms = v;
  }
  if (!opt.lease_wait.empty()) {
    uint64_t v;
    Status st = admin::parse_duration(opt.lease_wait, &v);
    if (!st.ok()) fail(Status::InvalidArgument("--lease-wait: " + st.message()));
    o.lease_wait_ms = v;
  }
  if (!opt.writer_wait.empty()) {
    uint64_t v;
    Status st = admin::parse_duration(opt.writer_wait, &v);
    if (!st.ok()) fail(Status::InvalidArgument("--writer-wait: " + st.message()));
    o.writer_wait_ms = v;
  }
  o.ns = opt.ns;
  o.dry_run = opt.dry_run;
  o.unreferenced = opt.unreferenced;
  o.verify = opt.verify;
  o.progress = make_progress("gc", opt.common);
  Status st = admin::gc(opt.store, o, &rep);
  // A live writer that did not answer: the report says what was planned and asked, beside the error.
  finish("gc", opt.common, st, rep, st.ok() || rep.live_writer);
}

}  // namespace ucm::cli
