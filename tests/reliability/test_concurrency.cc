// Concurrency (docs/reliability.md §4): 4 reader processes load random present blocks in a loop
// while a writer process dumps new blocks and, between writing phases, runs gc with --max-bytes
// (so blocks disappear under the readers) and a grace period longer than the readers' catch-up.
// Asserts: no error but NotFound, never wrong bytes, new blocks visible to readers within 5 s.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "rel_common.h"
#include "rel_proc.h"

namespace {

constexpr int kReaders = 4;
constexpr uint64_t kInitial = 300;           // blocks dumped before the readers start
constexpr uint64_t kWriterMs = 10000;        // writer runs this long
constexpr uint64_t kReaderMs = 13000;        // readers run this long
constexpr uint64_t kBatch = 16, kIntervalMs = 100, kPhaseMs = 2500;
constexpr uint64_t kMaxBytes = 500 * rel::kPayload;  // gc keeps at most ~500 blocks
constexpr uint64_t kGraceMs = 3000;          // > reader catch-up interval (1 s)
constexpr uint64_t kMaxIndex = 2600;

std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> v;
  std::ifstream in(path);
  std::string l;
  while (std::getline(in, l)) v.push_back(l);
  return v;
}

TEST(ReliabilityConcurrency, ReadersWriterAndGcTogether) {
  const std::string root = rel::make_temp_dir("ucm-conc");
  const std::string S = root + "/store";
  {
    rel::Child c;
    ASSERT_TRUE(rel::spawn_child({"dump", S, "0", std::to_string(kInitial), "50"}, &c));
    c.reap();
    ASSERT_TRUE(c.exited_ok()) << c.output;
  }
  std::vector<rel::Child> readers(kReaders);
  for (int r = 0; r < kReaders; ++r)
    ASSERT_TRUE(rel::spawn_child({"reader", S, std::to_string(kReaderMs), std::to_string(kMaxIndex),
                                  std::to_string(1000 + r)},
                                 &readers[static_cast<size_t>(r)], root + "/reader" + std::to_string(r) + ".log"));
  rel::Child writer;
  ASSERT_TRUE(rel::spawn_child({"writer", S, std::to_string(kWriterMs), std::to_string(kInitial),
                                std::to_string(kBatch), std::to_string(kIntervalMs), std::to_string(kPhaseMs),
                                std::to_string(kMaxBytes), std::to_string(kGraceMs)},
                               &writer, root + "/writer.log"));
  writer.reap();
  for (auto& r : readers) r.reap();

  // Writer: commit times, gc evictions.
  std::map<uint64_t, uint64_t> commit_ms;
  uint64_t evicted = 0, gc_runs = 0, next = 0;
  std::string werr;
  const std::string wlog = root + "/writer.log";
  rel::for_each_report(read_lines(wlog), [&](const std::string& w, std::istream& in, const std::string& l) {
    if (w == "commit") {
      uint64_t a, b, t;
      in >> a >> b >> t;
      for (uint64_t i = a; i <= b; ++i) commit_ms[i] = t;
    } else if (w == "gc") {
      uint64_t e, d;
      in >> e >> d;
      evicted += e;
      ++gc_runs;
    } else if (w == "end") {
      in >> next;
    } else {
      werr += l + "\n";
    }
  });
  EXPECT_TRUE(writer.exited_ok()) << "writer status " << writer.status << "\n" << werr;
  EXPECT_EQ(werr, "");
  ASSERT_LT(next, kMaxIndex) << "writer wrote past the readers' index range; raise kMaxIndex";
  EXPECT_GT(evicted, 0u) << "gc never evicted: the readers were not exercised against disappearing blocks";

  uint64_t max_lag = 0, lag_sum = 0, lag_n = 0, loads = 0, ok = 0, notfound = 0;
  for (int r = 0; r < kReaders; ++r) {
    std::string errs;
    bool stats = false;
    const std::string log = root + "/reader" + std::to_string(r) + ".log";
    rel::for_each_report(read_lines(log), [&](const std::string& w, std::istream& in, const std::string& l) {
      if (w == "seen") {
        uint64_t i, t;
        in >> i >> t;
        auto it = commit_ms.find(i);
        if (it == commit_ms.end()) return;  // an initial block (present before the reader opened)
        const uint64_t lag = t > it->second ? t - it->second : 0;
        max_lag = std::max(max_lag, lag);
        lag_sum += lag;
        ++lag_n;
      } else if (w == "stats") {
        uint64_t it, l2, o, nf;
        in >> it >> l2 >> o >> nf;
        loads += l2;
        ok += o;
        notfound += nf;
        stats = true;
      } else {
        errs += l + "\n";
      }
    });
    EXPECT_TRUE(readers[static_cast<size_t>(r)].exited_ok()) << "reader " << r << " status "
                                                               << readers[static_cast<size_t>(r)].status << "\n" << errs;
    EXPECT_EQ(errs, "") << "reader " << r << " saw errors or wrong bytes";
    EXPECT_TRUE(stats) << "reader " << r << " did not finish";
  }
  std::printf("[ reliability ] concurrency: writer committed %zu blocks, %llu gc runs evicted %llu blocks; "
              "%d readers: %llu block loads, %llu OK (bytes checked), %llu NotFound (evicted); visibility lag "
              "over %llu first sightings: mean %.0f ms, max %llu ms\n",
              commit_ms.size(), (unsigned long long)gc_runs, (unsigned long long)evicted, kReaders,
              (unsigned long long)loads, (unsigned long long)ok, (unsigned long long)notfound,
              (unsigned long long)lag_n, lag_n ? double(lag_sum) / double(lag_n) : 0.0,
              (unsigned long long)max_lag);
  RecordProperty("max_visibility_lag_ms", std::to_string(max_lag));
  EXPECT_GT(commit_ms.size(), 100u);
  EXPECT_GT(ok, 1000u);
  EXPECT_GT(lag_n, commit_ms.size() / 2) << "readers saw less than half of the new blocks";
  EXPECT_LT(max_lag, 5000u) << "a new block took longer than 5 s to become visible";
  if (!HasFailure()) rel::rm_rf(root);
  else std::printf("[ reliability ] kept %s\n", root.c_str());
}

}  // namespace
