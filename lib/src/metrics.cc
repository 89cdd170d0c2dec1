// lib/src/metrics.cc: see metrics.h.
#include "ucm/core/metrics.h"

#include <cstdio>

namespace ucm {

void LatencyHistogram::observe_ns(uint64_t ns) {
  const double s = double(ns) * 1e-9;
  size_t i = 0;
  while (i < kBounds.size() && s > kBounds[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

namespace {
std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}
void counter(std::string* o, const char* name, const char* help, uint64_t v) {
  *o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name + " " +
        std::to_string(v) + "\n";
}
}  // namespace

void LatencyHistogram::render(std::string* o, const char* name, const char* help) const {
  *o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cum = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cum += buckets_[i].load(std::memory_order_relaxed);
    *o += std::string(name) + "_bucket{le=\"" + num(kBounds[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  cum += buckets_[kBounds.size()].load(std::memory_order_relaxed);
  *o += std::string(name) + "_bucket{le=\"+Inf\"} " + std::to_string(cum) + "\n";
  *o += std::string(name) + "_sum " + num(double(sum_ns_.load()) * 1e-9) + "\n";
  *o += std::string(name) + "_count " + std::to_string(count_.load()) + "\n";
}

std::string Metrics::render(uint64_t index_blocks) const {
  std::string o;
  counter(&o, "ucm_lookups_total", "Block hashes looked up.", lookups.load());
  counter(&o, "ucm_lookup_hits_total", "Looked-up block hashes found present.", lookup_hits.load());
  counter(&o, "ucm_blocks_loaded_total", "Blocks loaded (checksum verified) into caller memory.", blocks_loaded.load());
  counter(&o, "ucm_bytes_loaded_total", "Bytes copied into caller memory by loads.", bytes_loaded.load());
  counter(&o, "ucm_blocks_dumped_total", "Blocks written and committed by dumps.", blocks_dumped.load());
  counter(&o, "ucm_bytes_dumped_total", "Payload and representation bytes written by dumps.", bytes_dumped.load());
  counter(&o, "ucm_dump_skipped_total", "Dumped blocks that were already present (no-ops).", dump_skipped.load());
  counter(&o, "ucm_gc_requests_applied_total", "gc requests this writer applied (store_v1.md 11.5).",
          gc_requests_applied.load());
  counter(&o, "ucm_gc_requests_refused_total", "Malformed gc requests this writer refused (renamed .bad).",
          gc_requests_refused.load());
  counter(&o, "ucm_gc_blocks_removed_total", "Blocks removed by gc requests this writer applied.",
          gc_blocks_removed.load());
  counter(&o, "ucm_corrupt_blocks_reported_total",
          "Corrupt blocks this handle's loads found and handed to the store's writer for removal (store_v1.md 11.6).",
          corrupt_reported.load());
  counter(&o, "ucm_corrupt_blocks_removed_total", "Of those, removed by the writer (its answers read so far).",
          corrupt_removed.load());
  counter(&o, "ucm_corrupt_blocks_unreported_total",
          "Corrupt blocks not handed over (the request could not be written 3 times).", corrupt_dropped.load());
  counter(&o, "ucm_refreshes_total", "Catch-ups with the writer (read-only handles).", refreshes.load());
  o += "# HELP ucm_errors_total Per-block and per-call errors by code.\n# TYPE ucm_errors_total counter\n";
  for (int c = 1; c < int(errors.size()); ++c) {
    if (c == int(Code::kPending)) continue;
    o += std::string("ucm_errors_total{code=\"") + code_name(Code(c)) + "\"} " + std::to_string(errors[c].load()) + "\n";
  }
  o += "# HELP ucm_index_blocks Blocks in this handle's lookup table.\n# TYPE ucm_index_blocks gauge\n";
  o += "ucm_index_blocks " + std::to_string(index_blocks) + "\n";
  o += "# HELP ucm_fptable_loaded 1 if this handle's open used the persisted fingerprint table, 0 if it rebuilt it.\n"
       "# TYPE ucm_fptable_loaded gauge\n";
  o += "ucm_fptable_loaded " + std::to_string(fptable_loaded.load()) + "\n";
  o += "# HELP ucm_fptable_replayed Journal entries replayed into the persisted table at open.\n"
       "# TYPE ucm_fptable_replayed gauge\n";
  o += "ucm_fptable_replayed " + std::to_string(fptable_replayed.load()) + "\n";
  lookup.render(&o, "ucm_lookup_seconds", "Latency of a lookup call.");
  load_task.render(&o, "ucm_load_task_seconds", "Latency of a load task, submission to completion.");
  dump_task.render(&o, "ucm_dump_task_seconds", "Latency of a dump task, submission to durable commit.");
  return o;
}

}  // namespace ucm
