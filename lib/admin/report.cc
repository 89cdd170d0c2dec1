// JSON and text rendering of the admin reports (ucm/admin.h).
#include <iomanip>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <ctime>
#include <sstream>
#include <string>

#include "admin_internal.h"
#include "ucm/admin.h"
#include "ucm/clock.h"

namespace ucm::admin {

using ojson = nlohmann::ordered_json;

std::string format_time_ms(uint64_t ms) { return ms == 0 ? "-" : iso_time(ms, true); }

std::string format_age(uint64_t ms, uint64_t now_ms) {
  if (ms == 0) return "-";
  if (ms > now_ms) return ms - now_ms < 1000 ? "just now" : "in the future";
  const uint64_t s = (now_ms - ms) / 1000;
  if (s < 1) return "just now";
  if (s < 120) return std::to_string(s) + " s ago";
  if (s < 120 * 60) return std::to_string(s / 60) + " min ago";
  if (s < 48 * 3600) return std::to_string(s / 3600) + " h ago";
  return std::to_string(s / 86400) + " d ago";
}

std::string format_bytes(uint64_t b) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

// ------------------------------------------------------------------------------------ build
std::string BuildReport::to_json() const {
  ojson j;
  j["created"] = created;
  j["rebuilt"] = rebuilt;
  j["message"] = format_message;
  if (rebuilt) {
    j["moved_index_to"] = moved_index_to;
    j["files_scanned"] = files_scanned;
    j["blocks_indexed"] = blocks_indexed;
    j["corrupt_records"] = corrupt_records;
    j["duplicate_records"] = duplicate_records;
    j["torn_bytes"] = torn_bytes;
    j["namespaces"] = namespaces;
    j["documents"] = documents;
    j["incomplete_documents"] = incomplete_documents;
    j["unknown_namespace_records"] = unknown_namespace_records;
  }
  return j.dump(2);
}

std::string BuildReport::to_text() const {
  std::ostringstream o;
  o << format_message << "\n";
  if (rebuilt) {
    if (!moved_index_to.empty()) o << "old index moved to " << moved_index_to << "\n";
    o << "scanned " << files_scanned << " data files: " << blocks_indexed << " blocks, "
      << namespaces << " namespaces, " << documents << " documents indexed (" << incomplete_documents
      << " incomplete left out); " << corrupt_records
      << " corrupt records skipped, " << duplicate_records << " duplicates, " << torn_bytes
      << " torn tail bytes, " << unknown_namespace_records
      << " records of unknown namespaces\n";
  }
  return o.str();
}

// ---------------------------------------------------------------------------------- inspect
namespace {
/// gc beside a live writer (store_v1.md §11.5): what was handed to it.
ojson handoff_json(const GcHandoff& h) {
  ojson j;
  j["requested"] = h.requested;
  j["answered"] = h.answered;
  j["outcome"] = h.outcome;
  j["holder"] = h.holder;
  j["request"] = h.nonce;
  j["writer"] = h.writer;
  j["blocks_requested"] = h.blocks_requested;
  j["blocks_removed"] = h.blocks_removed;
  j["blocks_absent"] = h.blocks_absent;
  j["bytes_removed"] = h.bytes_removed;
  j["documents_removed"] = h.documents_removed;
  j["files_retired"] = h.files_retired;
  j["files_unlinked"] = h.files_unlinked;
  j["bytes_unlinked"] = h.bytes_unlinked;
  j["errors"] = h.errors;
  j["skipped"] = "compaction, unindexed tails, unreferenced files, journal trimming and STORE/fptable (they need "
                 "the writer lock)";
  return j;
}

std::string handoff_text(const GcHandoff& h) {
  std::string t = h.outcome;
  if (h.requested)
    t += "; " + std::to_string(h.blocks_removed) + " of " + std::to_string(h.blocks_requested) + " blocks removed (" +
         format_bytes(h.bytes_removed) + "), " + std::to_string(h.files_retired) + " files retired, " +
         std::to_string(h.files_unlinked) + " unlinked";
  for (const auto& e : h.errors) t += "; error: " + e;
  return t;
}

ojson shard_json(const ShardSummary& x, bool gc) {
  ojson j;
  j["name"] = x.name;
  j["state"] = x.state;
  if (gc) {
    j["blocks_before"] = x.blocks;
    j["bytes_before"] = x.bytes;
    j["evicted_blocks"] = x.evicted_blocks;
    j["evicted_bytes"] = x.evicted_bytes;
    j["blocks_after"] = x.blocks_after;
    j["bytes_after"] = x.bytes_after;
    j["live_writer"] = x.live_writer;
    if (x.live_writer) j["handoff"] = handoff_json(x.handoff);
  } else {
    j["blocks"] = x.blocks;
    j["bytes"] = x.bytes;
    j["data_files"] = x.data_files;
    j["data_bytes"] = x.data_bytes;
    j["dead_bytes"] = x.dead_bytes;
    j["verified"] = x.verified;
    j["corrupt_total"] = x.corrupt_total;
  }
  return j;
}
}  // namespace

std::string InspectReport::to_json() const {
  ojson j;
  j["path"] = path;
  j["format_version"] = format_version;
  j["created_by"] = created_by;
  j["created_ms"] = created_ms;
  j["created"] = format_time_ms(created_ms);
  j["blocks"] = blocks;
  j["bytes"] = bytes;
  j["data_files"] = data_files;
  j["data_bytes"] = data_bytes;
  j["dead_bytes"] = dead_bytes;
  j["retired_files"] = retired_files;
  j["sharded"] = sharded;
  if (sharded) {
    ojson sh = ojson::array();
    for (const auto& x : shards) sh.push_back(shard_json(x, false));
    j["shards"] = std::move(sh);
  }
  auto iso = [](uint64_t ms) { return ms ? ojson(format_time_ms(ms)) : ojson(nullptr); };
  j["inspected_ms"] = now_ms;
  j["inspected"] = iso(now_ms);
  j["oldest_created_ms"] = oldest_created_ms;
  j["oldest_created"] = iso(oldest_created_ms);
  j["newest_created_ms"] = newest_created_ms;
  j["newest_created"] = iso(newest_created_ms);
  j["oldest_access_ms"] = oldest_access_ms;
  j["oldest_access"] = iso(oldest_access_ms);
  j["newest_access_ms"] = newest_access_ms;
  j["newest_access"] = iso(newest_access_ms);
  j["access_percentiles_ms"] = ojson{{"p10", access_p10_ms}, {"p50", access_p50_ms},
                                     {"p90", access_p90_ms}};
  j["access_percentiles"] = ojson{{"p10", iso(access_p10_ms)}, {"p50", iso(access_p50_ms)},
                                  {"p90", iso(access_p90_ms)}};
  ojson nss = ojson::array();
  for (const auto& n : namespaces) {
    ojson x;
    x["name"] = n.name;
    x["id"] = n.id_hex;
    x["model_id"] = n.model_id;
    x["dtype"] = n.dtype;
    x["block_size"] = n.block_size;
    x["num_layers"] = n.num_layers;
    x["num_kv_heads"] = n.num_kv_heads;
    x["head_dim"] = n.head_dim;
    x["weights_digest"] = n.weights_digest;
    if (!n.hash_seed_namespace.empty()) x["hash_seed_namespace"] = n.hash_seed_namespace;
    if (!n.sglang_pages_of.empty())
      x["sglang_pages"] = {{"of", n.sglang_pages_of}, {"head_begin", n.sglang_head_begin}, {"head_end", n.sglang_head_end}};
    x["blocks"] = n.blocks;
    x["bytes"] = n.bytes;
    x["documents"] = n.documents;
    x["blocks_with_tokens"] = n.blocks_with_tokens;
    nss.push_back(std::move(x));
  }
  j["namespaces"] = std::move(nss);
  if (verified_run) {
    j["verified"] = verified;
    j["verified_bytes"] = verified_bytes;
    j["verify_s"] = verify_seconds;
    j["verify_gbps"] = verify_seconds > 0 ? double(verified_bytes) / verify_seconds / 1e9 : 0.0;
    j["corrupt_total"] = corrupt_total;
    ojson c = ojson::array();
    for (const auto& b : corrupt)
      c.push_back(b.shard.empty() ? ojson{{"namespace", b.ns_hex}, {"block", b.block_hex}, {"reason", b.reason}}
                                  : ojson{{"shard", b.shard}, {"namespace", b.ns_hex}, {"block", b.block_hex},
                                          {"reason", b.reason}});
    j["corrupt"] = std::move(c);
  }
  if (!block_json.empty()) j["block"] = ojson::parse(block_json);
  if (docs_run) j["docs"] = docs_json.empty() ? ojson::array() : ojson::parse(docs_json);
  return j.dump(2);
}

std::string InspectReport::to_text() const {
  std::ostringstream o;
  o << "store            " << path << "\n";
  o << "format version   " << format_version << "\n";
  o << "created          " << format_time_ms(created_ms) << " by " << created_by << "\n";
  o << "blocks           " << blocks << " (" << format_bytes(bytes) << " payload+repr)\n";
  o << "data files       " << data_files << " (" << format_bytes(data_bytes) << ", dead "
    << format_bytes(dead_bytes);
  if (data_bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " = %.1f%%", 100.0 * static_cast<double>(dead_bytes) /
                                                    static_cast<double>(data_bytes));
    o << buf;
  }
  o << "; " << retired_files << " retired)\n";
  if (sharded) {
    o << "shards           " << shards.size() << " (totals above; access percentiles approximate)\n";
    for (const auto& x : shards)
      o << "  " << x.name << ": " << (x.state == "ok" ? "" : x.state + "; ") << x.blocks << " blocks, "
        << format_bytes(x.bytes) << ", " << x.data_files << " data files (" << format_bytes(x.data_bytes)
        << ", dead " << format_bytes(x.dead_bytes) << ")"
        << (verified_run ? ", " + std::to_string(x.verified) + " verified, " + std::to_string(x.corrupt_total) +
                               " corrupt"
                         : std::string())
        << "\n";
  }
  if (blocks) {
    auto age = [&](uint64_t ms) { return format_age(ms, now_ms); };
    o << "block created    oldest " << age(oldest_created_ms) << ", newest "
      << age(newest_created_ms) << "  (" << format_time_ms(oldest_created_ms) << " .. "
      << format_time_ms(newest_created_ms) << ")\n";
    o << "last access      oldest " << age(oldest_access_ms) << ", p10 " << age(access_p10_ms)
      << ", p50 " << age(access_p50_ms) << ", p90 " << age(access_p90_ms) << ", newest "
      << age(newest_access_ms) << "  (" << format_time_ms(oldest_access_ms) << " .. "
      << format_time_ms(newest_access_ms) << ")\n";
  }
  o << "namespaces       " << namespaces.size() << "\n";
  for (const auto& n : namespaces) {
    o << "  " << n.name << "  id " << n.id_hex << "\n    " << n.model_id << " " << n.dtype
      << " block_size " << n.block_size << " L" << n.num_layers << " H" << n.num_kv_heads << " D"
      << n.head_dim << ": " << n.blocks << " blocks, " << format_bytes(n.bytes) << ", "
      << n.documents << " documents\n";
    if (!n.sglang_pages_of.empty())
      o << "    SGLang pages     of namespace " << n.sglang_pages_of << ", KV heads [" << n.sglang_head_begin << ", "
        << n.sglang_head_end << "), keyed by page key (no token ids; store_v1.md §12.2)\n";
    else if (n.blocks)
      o << "    token ids        " << n.blocks_with_tokens << " of " << n.blocks << " blocks"
        << (n.blocks_with_tokens < n.blocks ? " (the rest: tokens unknown)" : "") << "\n";
    if (!n.hash_seed_namespace.empty())
      o << "    block hashes seeded with namespace " << n.hash_seed_namespace << "\n";
  }
  if (verified_run) {
    char rate[64];
    std::snprintf(rate, sizeof rate, "%.2f", verify_seconds > 0 ? double(verified_bytes) / verify_seconds / 1e9 : 0.0);
    o << "verify           " << verified << " blocks ok, " << corrupt_total << " corrupt; "
      << format_bytes(verified_bytes) << " read in " << std::fixed << std::setprecision(1) << verify_seconds
      << std::defaultfloat << std::setprecision(6) << " s (" << rate << " GB/s)\n";
    if (corrupt_total > corrupt.size()) o << "  (the first " << corrupt.size() << " are listed)\n";
    for (const auto& c : corrupt)
      o << "  CORRUPT " << (c.shard.empty() ? "" : "shard " + c.shard + " ") << c.ns_hex << ":" << c.block_hex
        << ": " << c.reason << "\n";
  }
  if (!block_json.empty()) o << "block\n" << ojson::parse(block_json).dump(2) << "\n";
  if (docs_run) {
    ojson d = docs_json.empty() ? ojson::array() : ojson::parse(docs_json);
    o << "documents        " << d.size() << "\n";
    for (const auto& e : d)
      o << "  " << e.value("id", std::string()) << "  " << e.value("blocks", 0) << " blocks, "
        << e.value("tokens", 0) << " tokens"
        << (e.value("input", std::string("text")) == "token_ids" ? " (from token ids)" : "") << ", last "
        << e.value("last_block", std::string())
        << (e.value("source", std::string()).empty() ? "" : "  " + e.value("source", std::string()))
        << "\n";
    for (const auto& e : d)  // ucm inspect --docs --model: the documents' text
      if (e.contains("text") && e["text"].is_string()) o << "  --- " << e.value("id", std::string()) << "\n" << e["text"].get<std::string>() << "\n";
  }
  return o.str();
}

// --------------------------------------------------------------------------------------- gc
std::string GcReport::to_json() const {
  ojson j;
  j["dry_run"] = dry_run;
  j["blocks_before"] = blocks_before;
  j["bytes_before"] = bytes_before;
  j["evicted_blocks"] = evicted_blocks;
  j["evicted_bytes"] = evicted_bytes;
  j["evicted_descendants"] = evicted_descendants;
  j["unreferenced_removed"] = unreferenced_removed;
  j["orphans_removed"] = orphans_removed;
  j["corrupt_removed"] = corrupt_removed;
  j["files_compacted"] = files_compacted;
  j["files_retired"] = files_retired;
  j["files_deleted"] = files_deleted;
  j["unreferenced_files_deleted"] = unreferenced_files_deleted;
  j["tails_truncated"] = tails_truncated;
  j["tail_bytes_truncated"] = tail_bytes_truncated;
  j["bytes_reclaimed"] = bytes_reclaimed;
  j["access_logs_merged"] = access_logs_merged;
  j["access_logs_deleted"] = access_logs_deleted;
  j["stale_dirs_removed"] = stale_dirs_removed;
  j["journal_trimmed"] = journal_trimmed;
  j["fptable_updated"] = fptable_updated;
  j["fptable_replayed"] = fptable_replayed;
  if (!fptable_skipped.empty()) j["fptable_skipped"] = fptable_skipped;
  j["documents_removed"] = documents_removed;
  j["documents_removed_ids"] = documents_removed_ids;
  j["blocks_after"] = blocks_after;
  j["bytes_after"] = bytes_after;
  if (dry_run) j["would_evict"] = would_evict;
  j["foreign_roots"] = foreign_roots;
  j["live_writer"] = live_writer;
  if (live_writer) j["handoff"] = handoff_json(handoff);
  j["sharded"] = sharded;
  if (sharded) {
    j["lease_holder"] = lease_holder;
    j["lease_taken_over_from"] = lease_taken_over_from;
    j["shards_busy"] = shards_busy;
    j["shards_retired"] = shards_retired;
    j["shards_handed_off"] = shards_handed_off;
    ojson sh = ojson::array();
    for (const auto& x : shards) sh.push_back(shard_json(x, true));
    j["shards"] = std::move(sh);
  }
  return j.dump(2);
}

std::string GcReport::to_text() const {
  std::ostringstream o;
  if (dry_run) o << "dry run: nothing changed\n";
  o << "before           " << blocks_before << " blocks, " << format_bytes(bytes_before) << "\n";
  o << (dry_run ? "would evict      " : "evicted          ") << evicted_blocks << " blocks ("
    << format_bytes(evicted_bytes) << "; " << evicted_descendants
    << " as descendants of evicted blocks, " << unreferenced_removed << " unreferenced)\n";
  o << (dry_run ? "would remove     " : "removed          ") << orphans_removed << " orphans, "
    << corrupt_removed << " corrupt blocks\n";
  o << (dry_run ? "would unregister " : "unregistered     ") << documents_removed
    << " documents that lost blocks (precompute --resume computes them again)\n";
  for (size_t i = 0; i < documents_removed_ids.size() && i < 20; ++i)
    o << "  document " << documents_removed_ids[i] << "\n";
  o << "data files       " << files_compacted << " compacted, " << files_retired << " retired, "
    << files_deleted << " deleted, " << unreferenced_files_deleted
    << " unreferenced deleted, " << tails_truncated << " unindexed tails truncated ("
    << format_bytes(tail_bytes_truncated) << "); reclaimed " << format_bytes(bytes_reclaimed)
    << "\n";
  o << "housekeeping     " << access_logs_merged << " access logs merged, " << access_logs_deleted
    << " deleted; " << stale_dirs_removed << " stale dirs/files removed; "
    << journal_trimmed << " journal entries " << (dry_run ? "to trim" : "trimmed") << "\n";
  if (!dry_run && (fptable_updated || !fptable_skipped.empty()))
    o << "fingerprints     "
      << (fptable_updated ? "table brought up to date (" + std::to_string(fptable_replayed) + " journal entries)"
                          : "table not updated: " + fptable_skipped + " (the next open replays or rebuilds it)")
      << "\n";
  if (live_writer && !sharded)
    o << "live writer      " << handoff_text(handoff)
      << " (compaction and tail truncation skipped: they need the writer lock)\n";
  o << "after            " << blocks_after << " blocks, " << format_bytes(bytes_after) << "\n";
  if (sharded) {
    o << "lease            held as " << lease_holder
      << (lease_taken_over_from.empty() ? std::string() : "; took over the expired lease of " + lease_taken_over_from)
      << "\n";
    o << "shards           " << shards.size() << ": " << shards_busy << " busy (left as they are), " << shards_retired
      << " retired\n";
    if (shards_handed_off)
      o << "live writers     " << shards_handed_off << " shards planned read-only and handed to their writers\n";
    for (const auto& x : shards) {
      o << "  " << x.name << ": " << x.state << "; " << x.blocks << " blocks (" << format_bytes(x.bytes) << ") -> "
        << x.blocks_after << " (" << format_bytes(x.bytes_after) << ")\n";
      if (x.live_writer) o << "    live writer: " << handoff_text(x.handoff) << "\n";
    }
  }
  if (dry_run)
    for (const auto& w : would_evict) o << "  would evict " << w << "\n";
  return o.str();
}

// ---------------------------------------------------------------------------------- migrate
std::string MigrateReport::to_json() const {
  ojson j;
  j["message"] = message;
  j["upgraded"] = upgraded;
  j["namespaces"] = namespaces;
  j["dst_namespaces"] = dst_namespaces;
  j["attachments"] = attachments;
  j["blocks_copied"] = blocks_copied;
  j["blocks_skipped"] = blocks_skipped;
  j["bytes_copied"] = bytes_copied;
  j["documents"] = documents;
  return j.dump(2);
}

std::string MigrateReport::to_text() const {
  std::ostringstream o;
  if (!message.empty()) o << message << "\n";
  if (!upgraded && (namespaces || blocks_copied || blocks_skipped)) {
    o << namespaces << " namespaces, " << attachments << " attachments, " << blocks_copied
      << " blocks copied (" << format_bytes(bytes_copied) << "), " << blocks_skipped
      << " already present, " << documents << " documents\n";
    for (const auto& n : dst_namespaces) o << "  -> namespace " << n << "\n";
  }
  return o.str();
}

}  // namespace ucm::admin
