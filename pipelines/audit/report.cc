// pipelines/audit/report.cc: AuditReport as JSON (--json) and text.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ucm/audit/audit.h"

namespace ucm::audit {

std::string AuditReport::to_json() const {
  nlohmann::ordered_json j;
  j["store"] = store;
  j["namespace"] = ns_name;
  j["namespace_id"] = ns_hex;
  j["dtype"] = dtype;
  j["compute_dtype"] = compute_dtype;
  j["compute_path"] = compute_path;
  j["blocks_in_namespace"] = blocks_in_namespace;
  j["sampled"] = sampled;
  j["audited"] = audited;
  j["chains"] = chains;
  j["tokens_recomputed"] = tokens_recomputed;
  j["tokens_unknown"] = tokens_unknown;
  j["missing"] = missing;
  j["load_errors"] = load_errors;
  j["honest"] = honest;
  j["poisoned_total"] = poisoned_total;
  j["tolerance"] = tolerance;
  j["max_honest_deviation"] = max_honest_deviation;
  j["min_poisoned_deviation"] = min_poisoned_deviation;
  auto list = nlohmann::ordered_json::array();
  for (const auto& p : poisoned)
    list.push_back({{"block", p.block_hex}, {"chain_position", p.chain_position}, {"first_bad_layer", p.first_bad_layer},
                    {"first_bad_kv", p.first_bad_kv}, {"deviation", p.deviation}});
  j["poisoned"] = std::move(list);
  j["seconds"] = seconds;
  j["fixed"] = fixed;
  if (fixed) {
    j["fix_blocks_removed"] = fix_blocks_removed;
    j["fix_documents_removed"] = fix_documents_removed;
    j["fix_message"] = fix_message;
  }
  return j.dump();
}

std::string AuditReport::to_text() const {
  std::ostringstream o;
  char buf[256];
  o << "audit            " << store << ", namespace " << ns_name << " (" << dtype << "), recomputed in "
    << compute_dtype << " (" << compute_path << ")\n";
  o << "blocks           " << audited << " audited of " << blocks_in_namespace << " (" << sampled << " drawn, "
    << chains << " chains, " << tokens_recomputed << " tokens recomputed)\n";
  if (tokens_unknown || missing || load_errors)
    o << "not audited      " << tokens_unknown << " drawn block(s) with tokens unknown, " << missing
      << " gone meanwhile, " << load_errors << " that did not load\n";
  std::snprintf(buf, sizeof buf, "%llu honest (largest deviation %.3g), %llu poisoned", (unsigned long long)honest,
                max_honest_deviation, (unsigned long long)poisoned_total);
  o << "result           " << buf;
  if (poisoned_total) {
    std::snprintf(buf, sizeof buf, " (smallest deviation %.3g)", min_poisoned_deviation);
    o << buf;
  }
  std::snprintf(buf, sizeof buf, "; tolerance %.3g", tolerance);
  o << buf << "\n";
  for (const auto& p : poisoned) {
    std::snprintf(buf, sizeof buf, "  POISONED %s  chain position %llu, first bad layer %u %s, deviation %.3g\n",
                  p.block_hex.c_str(), (unsigned long long)p.chain_position, p.first_bad_layer,
                  p.first_bad_kv.c_str(), p.deviation);
    o << buf;
  }
  if (fixed) o << "fix              " << fix_message << "\n";
  std::snprintf(buf, sizeof buf, "%.1f", seconds);
  o << "time             " << buf << " s\n";
  return o.str();
}

}  // namespace ucm::audit
