// pipelines/precompute/report.cc: the precompute and bench summaries as text and JSON.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "ucm/precompute/precompute.h"

namespace ucm::precompute {
namespace {

std::string fmt_fixed(double v, int digits) {
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

// "2 prefill workers (avx512_bf16 kernels, one libtorch thread each, idle workers helping)" |
// "1 libtorch thread, OpenBLAS Cooperlake GEMMs" | "2 prefill workers (fp32_avx512 kernels, one
// libtorch thread each, OpenBLAS SkylakeX GEMMs in the worker's thread, idle workers helping)"
// (the fused kernels' crew: pipelines/model/include/ucm/model/crew.h).
std::string threads_text(int threads, const std::string& kernels, const std::string& blas_core,
                         const std::string& replaced) {
  const char* s = threads == 1 ? "" : "s";
  const std::string blas = blas_core.empty() ? std::string()
                           : "OpenBLAS " + blas_core + " GEMMs" +
                                 (replaced.empty() ? "" : " (the environment's OPENBLAS_CORETYPE=" + replaced + " replaced)");
  if (kernels == "libtorch")
    return std::to_string(threads) + " libtorch thread" + s + (blas.empty() ? std::string() : ", " + blas);
  return std::to_string(threads) + " prefill worker" + s + " (" + kernels + " kernels, one libtorch thread each" +
         (blas.empty() ? std::string() : ", " + blas + " in the worker's thread") +
         (threads > 1 ? ", idle workers helping" : "") + ")";
}

}  // namespace

std::string PrecomputeSummary::to_json() const {
  nlohmann::json j;
  j["documents"] = documents;
  j["documents_seen"] = documents_seen;
  nlohmann::json sk = nlohmann::json::object();
  uint64_t total = 0;
  for (auto& [k, v] : skipped) {
    sk[k] = v;
    total += v;
  }
  j["skipped"] = sk;
  j["skipped_total"] = total;
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& e : skipped_entries) {
    nlohmann::json x = {{"kind", e.kind}, {"location", e.location}, {"reason", e.reason}};
    if (!e.id.empty()) x["id"] = e.id;
    entries.push_back(std::move(x));
  }
  j["skipped_entries"] = std::move(entries);
  j["skipped_entries_truncated"] = skipped_entries_truncated;
  j["truncated"] = truncated;
  j["blocks_written"] = blocks_written;
  j["blocks_existing"] = blocks_existing;
  j["tokens"] = tokens;
  j["seconds"] = seconds;
  j["prefill_seconds"] = prefill_seconds;
  j["tokens_per_second"] = tokens_per_second;
  j["compute_dtype"] = compute_dtype;
  j["compute_path"] = compute_path;
  j["threads"] = threads;
  j["kernels"] = kernels;
  j["blas_core"] = blas_core;
  j["blas_core_replaced"] = blas_core_replaced;
  j["interrupted"] = interrupted;
  j["signal"] = signal;
  j["namespace"] = namespace_name;
  j["namespace_id"] = namespace_id;
  if (sglang_page_size) {
    j["sglang_page_size"] = sglang_page_size;
    j["sglang_pages"] = sglang_pages;
  }
  return j.dump();
}

std::string PrecomputeSummary::to_text() const {
  std::ostringstream s;
  s << "namespace " << namespace_name << " (" << namespace_id << ")\n";
  s << "documents " << documents << " registered, " << documents_seen << " read";
  if (!skipped.empty()) {
    s << ", skipped:";
    for (auto& [k, v] : skipped) s << " " << k << "=" << v;
  }
  s << ", truncated " << truncated << "\n";
  constexpr size_t kShown = 20;
  for (size_t i = 0; i < skipped_entries.size() && i < kShown; ++i) {
    const auto& e = skipped_entries[i];
    s << "  skipped (" << e.kind << ") " << e.location << (e.id.empty() ? "" : " id " + e.id) << ": " << e.reason
      << "\n";
  }
  if (skipped_entries.size() > kShown || skipped_entries_truncated)
    s << "  ... and more skipped entries (all of them: --json, or the warnings on stderr)\n";
  s << "blocks " << blocks_written << " written, " << blocks_existing << " already present\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "tokens %llu in %.1f s (%.0f tokens/s; prefill %.1f s, %s compute on %s, %s)\n",
                (unsigned long long)tokens, seconds, tokens_per_second, prefill_seconds, compute_dtype.c_str(),
                compute_path.c_str(), threads_text(threads, kernels, blas_core, blas_core_replaced).c_str());
  s << buf;
  if (sglang_page_size)
    s << "SGLang page table for page size " << sglang_page_size << ": " << sglang_pages << " pages\n";
  if (interrupted)
    s << "interrupted" << (signal ? " by signal " + std::to_string(signal) : std::string())
      << ": re-run with --resume to continue\n";
  return s.str();
}

std::string BenchResult::to_json() const {
  nlohmann::json j = {{"documents", documents},
                      {"tokens", tokens},
                      {"batches", batches},
                      {"prefill_seconds", prefill_seconds},
                      {"prefill_seconds_before", prefill_seconds_before},
                      {"prefill_seconds_after", prefill_seconds_after},
                      {"precompute_prefill_seconds", precompute_prefill_seconds},
                      {"prefill_tokens_per_second", prefill_tokens_per_second},
                      {"precompute_seconds", precompute_seconds},
                      {"precompute_tokens_per_second", precompute_tokens_per_second},
                      {"ratio", ratio},
                      {"rounds", rounds},
                      {"ratios", ratios},
                      {"device", device},
                      {"compute_dtype", compute_dtype},
                      {"compute_path", compute_path},
                      {"threads", threads},
                      {"kernels", kernels},
                      {"blas_core", blas_core},
                      {"blas_core_replaced", blas_core_replaced},
                      {"gemm_tokens", gemm_tokens},
                      {"gemm_gflop", gemm_gflop},
                      {"gemm_gflops", gemm_gflops},
                      {"matmul_limit_gflops", matmul_limit_gflops},
                      {"limit_ratio", limit_ratio}};
  return j.dump();
}

std::string BenchResult::to_text() const {
  std::string per_round;
  for (double r : ratios) per_round += (per_round.empty() ? "" : ", ") + fmt_fixed(r, 3);
  char buf[768];
  std::snprintf(buf, sizeof buf,
                "documents %llu, tokens %llu, batches %llu, rounds %d\n"
                "bare prefill:   %8.1f tokens/s (median of %d runs; first %.2f s, last %.2f s)\n"
                "full precompute:%8.1f tokens/s (%.2f s, of which %.2f s in the model forward)\n"
                "ratio %.3f (of the medians; per round: %s; target >= 0.95)\n"
                "compute %s (%s), %s, device %s\n",
                (unsigned long long)documents, (unsigned long long)tokens, (unsigned long long)batches, rounds,
                prefill_tokens_per_second, rounds + 1, prefill_seconds_before, prefill_seconds_after,
                precompute_tokens_per_second, precompute_seconds, precompute_prefill_seconds, ratio, per_round.c_str(),
                compute_dtype.c_str(), compute_path.c_str(), threads_text(threads, kernels, blas_core, blas_core_replaced).c_str(), device.c_str());
  std::string text = buf;
  if (matmul_limit_gflops > 0) {
    std::snprintf(buf, sizeof buf,
                  "GEMMs: %.1f GFLOP/s over the bare prefill (%.1f GFLOP, %llu rows), %.2f of the matmul "
                  "limit measured here (%.1f GFLOP/s)\n",
                  gemm_gflops, gemm_gflop, (unsigned long long)gemm_tokens, limit_ratio, matmul_limit_gflops);
    text += buf;
  }
  return text;
}

}  // namespace ucm::precompute
