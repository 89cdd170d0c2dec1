// tests/reliability/rel_check.h: whole-store checks shared by the reliability tests.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "rel_common.h"
#include "ucm/admin.h"
#include "ucm/store.h"

namespace rel {

struct StoreCheck {
  uint64_t present_keep = 0, present_victim = 0, verified_ok = 0;
};

/// Opens `path` read-only and checks, for generator indices [0, max_index) of both test
/// namespaces: every present block loads OK with exactly the generator's bytes; every index in
/// `must_have` (keep namespace) is present. `label` prefixes failure messages.
inline void check_blocks(const std::string& path, uint64_t max_index, const std::set<uint64_t>& must_have,
                         const std::string& label, StoreCheck* out) {
  ucm::OpenOptions o;
  o.mode = ucm::OpenOptions::Mode::kReadOnly;
  o.io_threads = 2;
  o.refresh_interval_ms = 0;
  std::unique_ptr<ucm::Store> st;
  ucm::Status s = ucm::Store::Open(path, o, &st);
  ASSERT_TRUE(s.ok()) << label << ": store does not open read-only: " << s.ToString();
  for (const char* which : {"keep", "victim"}) {
    const ucm::NamespaceId ns = test_desc(which).id();
    const bool keep = std::string(which) == "keep";
    std::vector<ucm::BlockHash> hashes(max_index);
    for (uint64_t i = 0; i < max_index; ++i) hashes[i] = block_hash(ns, i);
    std::vector<uint8_t> present(max_index, 0);
    size_t prefix = 0;
    s = st->lookup(ns, hashes.data(), hashes.size(), present.data(), &prefix);
    if (!s.ok()) {
      // An unknown namespace may be reported as an error or as all-absent; either way nothing is
      // present, which is only wrong if blocks were acknowledged.
      std::fill(present.begin(), present.end(), 0);
    }
    std::vector<uint64_t> idx;
    for (uint64_t i = 0; i < max_index; ++i) {
      if (present[i]) idx.push_back(i);
      else if (keep && must_have.count(i))
        ADD_FAILURE() << label << ": block " << i << " (" << ucm::to_hex(hashes[i])
                      << ") was acknowledged durable (dump wait() returned OK) but is missing"
                      << (s.ok() ? "" : " (lookup: " + s.ToString() + ")");
    }
    (keep ? out->present_keep : out->present_victim) += idx.size();
    const std::vector<uint8_t> sentinel(kPayload, 0x5A);
    for (size_t b = 0; b < idx.size(); b += 64) {
      const size_t n = std::min<size_t>(64, idx.size() - b);
      std::vector<ucm::BlockHash> pick(n);
      std::vector<std::vector<uint8_t>> bufs(n, sentinel);
      ucm::LoadDest d;
      for (size_t k = 0; k < n; ++k) {
        pick[k] = hashes[idx[b + k]];
        d.ptrs.push_back(bufs[k].data());
      }
      auto task = st->load(ns, pick.data(), n, d);
      (void)task->wait();  // per-block results below
      const auto& bs = task->block_status();
      ASSERT_EQ(bs.size(), n) << label;
      for (size_t k = 0; k < n; ++k) {
        const uint64_t i = idx[b + k];
        if (bs[k].ok()) {
          if (check_payload(pick[k], bufs[k].data())) ++out->verified_ok;
          else ADD_FAILURE() << label << ": " << which << " block " << i << " served WRONG BYTES";
        } else {
          EXPECT_EQ(bufs[k], sentinel) << label << ": failed load of block " << i << " wrote the destination";
          ADD_FAILURE() << label << ": " << which << " block " << i << " is present (lookup) but load says "
                        << bs[k].ToString();
        }
      }
    }
  }
}

/// inspect --verify must succeed with no corrupt block.
inline void check_verify(const std::string& path, const std::string& label,
                         ucm::admin::InspectReport* rep_out = nullptr) {
  ucm::admin::InspectOptions io;
  io.verify = true;
  ucm::admin::InspectReport rep;
  ucm::Status s = ucm::admin::inspect(path, io, &rep);
  EXPECT_TRUE(s.ok()) << label << ": inspect --verify: " << s.ToString();
  EXPECT_TRUE(rep.corrupt.empty()) << label << ": inspect --verify found " << rep.corrupt.size()
                                   << " corrupt blocks, first: "
                                   << (rep.corrupt.empty() ? "" : rep.corrupt[0].block_hex + " " + rep.corrupt[0].reason);
  if (rep_out) *rep_out = rep;
}

}  // namespace rel
