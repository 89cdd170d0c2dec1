// Smoke test of ucm::bench::run_index_bench (`ucm bench index`) with tiny sizes: the store is
// made, the opens use (or rebuild) the fingerprint table as they should, lookups all hit, the
// gc and inspect children run, the JSON carries the figures, the temp store goes. Not a timing test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "ucm/bench/index_bench.h"

namespace fs = std::filesystem;

TEST(BenchIndex, TinyRunReportsEveryPhase) {
  const std::string base = (fs::temp_directory_path() / ("ucm_bench_index_" + std::to_string(::getpid()))).string();
  fs::remove_all(base);
  ucm::bench::IndexBenchOptions o;
  o.dir = base;
  o.blocks = 3000;
  o.replay = 500;
  o.lookup_seconds = 0.1;
  o.ucm_exe = UCM_EXE;
  ucm::bench::IndexBenchReport r;
  ucm::Status s = ucm::bench::run_index_bench(o, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_GT(r.index_bytes, 0u);
  EXPECT_EQ(r.fptable_bytes, 4096u + 8u * 8192u);  // 3000 blocks: the next power of two >= 6000 slots
  EXPECT_GT(r.open_rebuild_s, 0);
  EXPECT_GT(r.open_cold_s, 0);
  EXPECT_EQ(r.replayed, 500u);
  EXPECT_GT(r.lookup.count, 0u);
  EXPECT_EQ(r.lookup_misses, 0u);
  EXPECT_EQ(r.inspect.exit_code, 0);
  EXPECT_EQ(r.gc.exit_code, 0);
  EXPECT_GT(r.gc_evicted, 0u);
  EXPECT_EQ(r.gc_replayed, 0u);  // gc brought the table up to its removals: the next open replays none
  EXPECT_GT(r.gc.peak_rss_bytes, 0u);
  EXPECT_GT(r.gc.peak_anon_bytes, 0u);
  const auto j = nlohmann::json::parse(r.to_json());
  EXPECT_EQ(j["blocks"], 3000);
  EXPECT_TRUE(j.contains("open_cold_s"));
  EXPECT_TRUE(j["gc"].contains("peak_anon_bytes"));
  EXPECT_EQ(j["targets"].size(), 3u);
  EXPECT_NE(r.to_text().find("lookups"), std::string::npos);
  // The temporary store is gone; nothing else was left in the parent.
  EXPECT_TRUE(fs::is_empty(base));
  fs::remove_all(base);
}
