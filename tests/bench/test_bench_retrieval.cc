// Smoke test of ucm::bench::run_retrieval_bench (`ucm bench retrieval`) with tiny sizes: every
// policy and context has sane figures, the JSON carries them and the targets. Not a timing test.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "ucm/bench/retrieval_bench.h"

namespace {

TEST(BenchRetrieval, TinyRunReportsEveryPolicyAndContext) {
  ucm::bench::RetrievalBenchOptions o;
  o.contexts = {16, 40};
  o.layers = 2;
  o.min_seconds = 0.01;
  o.memcpy_bytes = 1 << 20;
  ucm::bench::RetrievalBenchReport r;
  ASSERT_TRUE(ucm::bench::run_retrieval_bench(o, &r).ok());
  EXPECT_GT(r.memcpy_gbps, 0);
  ASSERT_EQ(r.figures.size(), 8u);
  std::set<std::string> pols;
  for (const auto& f : r.figures) {
    pols.insert(f.policy);
    EXPECT_TRUE(f.blocks == 16 || f.blocks == 40);
    EXPECT_GT(f.select_us, 0) << f.policy;
    EXPECT_GT(f.scan_us, 0) << f.policy;
    EXPECT_GE(f.steps, 3u);
    // One layer's scanned bytes: H * C * (R0: D * 2, R1: 2 * D * 2, R4: T * B / 8).
    const uint64_t per = f.policy == "esa" ? 128 : f.policy == "gsa" ? 256 : 256;
    EXPECT_EQ(f.layer_bytes, 3 * f.blocks * per) << f.policy;
    // Defaults: windows 1 + 2, ratio 0.3, min 4 -> max(4, ceil(0.3 C)) blocks per set (PSA: at most).
    const double k = std::max(4.0, std::ceil(0.3 * double(f.blocks) - 1e-9));
    if (f.policy == "psa") EXPECT_LE(f.mean_selected, k);
    else EXPECT_EQ(f.mean_selected, k) << f.policy;
  }
  EXPECT_EQ(pols, (std::set<std::string>{"esa", "quest", "gsa", "psa"}));
  EXPECT_EQ(r.targets.size(), 4u);  // esa and quest at each context
  const auto j = nlohmann::json::parse(r.to_json());
  EXPECT_EQ(j["figures"].size(), 8u);
  EXPECT_TRUE(j["figures"][0].contains("scan_gbps"));
  EXPECT_TRUE(j.contains("memcpy_gbps"));
  EXPECT_EQ(j["shape"]["layers"], 2);
  EXPECT_NE(r.to_text().find("quest"), std::string::npos);
  o.q_heads = 10;  // not a multiple of 3 KV heads
  EXPECT_EQ(ucm::bench::run_retrieval_bench(o, &r).code(), ucm::Code::kInvalidArgument);
}

}  // namespace
