// Smoke test of ucm::bench::run_store_bench (`ucm bench store`) with tiny sizes: every figure is
// present and sane, the JSON carries them, --keep leaves the namespaces, the temp store goes.
// Not a timing test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "temp_dir.h"
#include "ucm/bench/raw_io.h"
#include "ucm/bench/store_bench.h"
#include "ucm/store.h"

namespace fs = std::filesystem;
using ucm::bench::StoreBenchOptions;
using ucm::bench::StoreBenchReport;

namespace {

// A scratch dir on the build directory's file system (O_DIRECT needs a disk, not tmpfs).
class BenchSmoke : public ucm::test::MkdtempTest {
 protected:
  BenchSmoke() : MkdtempTest("bench-smoke-", fs::current_path()) {}
  StoreBenchOptions tiny() const {
    StoreBenchOptions o;
    o.dir = dir_.string();
    o.blocks = 40;
    o.block_bytes = 368640;
    o.batch = 8;
    o.inflight = 2;
    o.lookup_blocks = 3000;
    o.lookup_seconds = 0.2;
    o.seed = 7;
    return o;
  }
};

bool finite_pos(double v) { return std::isfinite(v) && v > 0; }

TEST_F(BenchSmoke, TinyRunReportsSaneFiguresAndRemovesTheTempStore) {
  StoreBenchReport r;
  ucm::Status s = ucm::bench::run_store_bench(tiny(), &r);
  ASSERT_TRUE(s.ok()) << s.ToString();

  EXPECT_EQ(r.blocks, 40u);
  EXPECT_EQ(r.block_bytes, 368640u);
  EXPECT_TRUE(r.raw_engine == "io_uring" || r.raw_engine == "threads") << r.raw_engine;
  // Every raw pass moves all 40 blocks at a sane rate (the other read modes included); every
  // store pass counts all 40.
  const std::pair<const char*, const ucm::bench::Figure*> raw[] = {
      {"raw_seq_write", &r.raw_seq_write},
      {"raw_rand_read", &r.raw_rand_read},
      {"raw_rand_read_deep", &r.raw_rand_read_deep},
      {"raw_rand_read_buffered", &r.raw_rand_read_buffered}};
  for (const auto& [name, f] : raw) {
    EXPECT_EQ(f->bytes, 40u * 368640u) << name;
    EXPECT_TRUE(finite_pos(f->gbps())) << name;
  }
  for (const ucm::bench::Figure* f : {&r.dump, &r.load, &r.load_deep, &r.load_buffered}) EXPECT_EQ(f->count, 40u);
  EXPECT_TRUE(finite_pos(r.dump.gbps()));
  EXPECT_TRUE(finite_pos(r.load.gbps()));
  EXPECT_TRUE(finite_pos(r.dump_ratio()));
  EXPECT_TRUE(finite_pos(r.load_ratio()));
  // Each record is a 4096-byte header page + the payload rounded up to pages (store_v1.md §3.2).
  EXPECT_GE(r.dump_disk_bytes, 40u * (4096u + 368640u));
  EXPECT_EQ(r.load_verified_samples, 15u);  // one per task of 8 blocks, in each of the three load modes
  EXPECT_TRUE(finite_pos(r.load_buffered.gbps()));
  EXPECT_GE(r.raw_best_gbps(), r.raw_rand_read_buffered.gbps());
  EXPECT_GE(r.load_best_gbps(), r.load.gbps());
  EXPECT_GE(r.resident_before_load, 0.0);
  EXPECT_LE(r.resident_before_load, 1.0);
  EXPECT_FALSE(r.cache_policy.empty());

  EXPECT_EQ(r.lookup_index_blocks, 3000u);
  EXPECT_EQ(r.lookup_batch, 64u);
  EXPECT_EQ(r.lookup_misses, 0u);
  EXPECT_GT(r.lookup.count, 0u);
  EXPECT_TRUE(finite_pos(r.lookups_per_s()));
  EXPECT_GE(r.lookup.seconds, 0.2);

  ASSERT_EQ(r.targets.size(), 4u);
  EXPECT_EQ(r.targets[0].name, "dump");
  EXPECT_EQ(r.targets[1].name, "load");
  EXPECT_EQ(r.targets[2].name, "load_best");
  EXPECT_DOUBLE_EQ(r.targets[2].value, r.load_best_gbps() / r.raw_best_gbps());
  EXPECT_EQ(r.targets[3].name, "lookup");
  EXPECT_DOUBLE_EQ(r.targets[0].value, r.dump_ratio());
  EXPECT_EQ(r.targets[0].pass, r.dump_ratio() >= 0.8);

  auto j = nlohmann::json::parse(r.to_json());
  EXPECT_DOUBLE_EQ(j["dump"]["ratio_vs_raw_seq_write"].get<double>(), r.dump_ratio());
  EXPECT_DOUBLE_EQ(j["load"]["ratio_vs_raw_rand_read"].get<double>(), r.load_ratio());
  EXPECT_GT(j["raw"]["seq_write"]["gbps"].get<double>(), 0);
  EXPECT_GT(j["raw"]["rand_read"]["gbps"].get<double>(), 0);
  EXPECT_GT(j["lookup"]["lookups_per_s"].get<double>(), 0);
  EXPECT_EQ(j["targets"].size(), 4u);
  EXPECT_EQ(j["load_modes"].size(), 3u);
  EXPECT_GT(j["raw"]["rand_read_buffered"]["gbps"].get<double>(), 0);
  EXPECT_GT(j["load_best"]["gbps"].get<double>(), 0);
  EXPECT_EQ(j["pass"].get<bool>(), r.all_pass());
  std::string text = r.to_text();
  EXPECT_NE(text.find("dump (durable)"), std::string::npos);
  EXPECT_NE(text.find("overall: "), std::string::npos);

  // The temporary store (and the raw scratch file inside it) is gone.
  EXPECT_TRUE(fs::is_empty(dir_)) << "left behind in " << dir_.string();
}

TEST_F(BenchSmoke, KeepLeavesTheBlocksInNamespaceBench) {
  StoreBenchOptions o = tiny();
  o.dir = (dir_ / "store").string();
  o.keep = true;
  o.blocks = 16;
  o.block_bytes = 8192;  // other sizes use a 1-layer namespace of the same payload size
  o.lookup_blocks = 100;
  o.lookup_batch = 16;
  StoreBenchReport r;
  ucm::Status s = ucm::bench::run_store_bench(o, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(r.kept);
  EXPECT_EQ(r.lookup_batch, 16u);

  std::unique_ptr<ucm::Store> st;
  ucm::OpenOptions ro;
  ro.refresh_interval_ms = 0;
  ASSERT_TRUE(ucm::Store::Open(o.dir, ro, &st).ok());
  ucm::NamespaceDesc desc;
  ucm::NamespaceId id{};
  ASSERT_TRUE(st->find_namespace("bench", &desc, &id).ok());
  EXPECT_EQ(desc.payload_bytes(), 8192u);
  ASSERT_TRUE(st->find_namespace("bench-lookup", &desc, &id).ok());
  // No raw scratch file left in tmp/.
  for (auto& e : fs::directory_iterator(fs::path(o.dir) / "tmp")) {
    EXPECT_EQ(e.path().filename().string().rfind("bench-raw-", 0), std::string::npos) << e.path();
  }
}

TEST_F(BenchSmoke, RejectsBlockBytesThatAreNotPageMultiples) {
  StoreBenchOptions o = tiny();
  o.block_bytes = 1000;
  StoreBenchReport r;
  ucm::Status s = ucm::bench::run_store_bench(o, &r);
  EXPECT_EQ(s.code(), ucm::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("4096"), std::string::npos) << s.message();
}

TEST_F(BenchSmoke, RawPassesWorkWithTheThreadEngine) {
  std::string f = (dir_ / "raw.dat").string();
  ucm::bench::RawIoEngine eng;
  eng.force_threads = true;
  ucm::bench::RawIoResult w, rd;
  std::string used;
  ASSERT_TRUE(ucm::bench::raw_seq_write(f, 65536, 32, 4, eng, &w, &used).ok());
  EXPECT_EQ(used, "threads");
  EXPECT_EQ(w.bytes, 32u * 65536u);
  EXPECT_EQ(fs::file_size(f), 32u * 65536u);
  ASSERT_TRUE(ucm::bench::raw_rand_read(f, 65536, 50, 4, 1, eng, &rd, &used).ok());
  EXPECT_EQ(rd.ios, 50u);
  EXPECT_TRUE(finite_pos(rd.gbps()));
}

}  // namespace
