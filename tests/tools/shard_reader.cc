// ucm_shard_reader: a reader node of the multi-node fault test (scripts/gluster/fault_test.sh).
// Opens a store read-only, the way a server keeps one handle open, and for --seconds loads the
// chain of every registered document again and again (chains walked from the registry's last
// block through the parents), recording an XXH3-64 digest of every block it loaded. A block hash
// is a content address: one hash seen with two digests is wrong bytes. Statuses are counted:
// OK, NOT_FOUND (a miss: evicted, or the file system away), anything else (an error).
//
//   ucm_shard_reader STORE [--seconds S] [--digests FILE] [--refresh-ms MS]
//
// SIGTERM or SIGINT ends the loop after the current document; the report is printed as usual.
//
// Prints one JSON object. Exit 0 unless wrong bytes were seen (3) or the store did not open (1).
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "ucm/format/format.h"
#include "ucm/store.h"

using namespace ucm;

namespace {
volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr, "usage: %s STORE [--seconds S] [--digests FILE] [--refresh-ms MS]\n", argv[0]);
    return 2;
  }
  std::string store = argv[1], digests_path;
  double seconds = 0;
  uint32_t refresh_ms = 1000;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--seconds") seconds = std::stod(argv[i + 1]);
    else if (a == "--digests") digests_path = argv[i + 1];
    else if (a == "--refresh-ms") refresh_ms = uint32_t(std::stoul(argv[i + 1]));
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  std::signal(SIGTERM, on_signal);  // SIGTERM / SIGINT: finish the current document, then report
  std::signal(SIGINT, on_signal);
  OpenOptions o;
  o.refresh_interval_ms = refresh_ms;
  o.io_threads = 4;
  std::unique_ptr<Store> s;
  const auto t_open = std::chrono::steady_clock::now();
  Status st;
  // The store may not exist yet (writers create it): retry for up to a minute.
  while (!(st = Store::Open(store, o, &s)).ok() && std::chrono::steady_clock::now() - t_open < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  if (!st.ok()) {
    std::printf("{\"error\": %s}\n", nlohmann::json(st.ToString()).dump().c_str());
    return 1;
  }
  std::map<std::string, uint64_t> digest;  // "ns:hash" -> XXH3 of the loaded payload
  uint64_t passes = 0, loads = 0, ok = 0, misses = 0, errors = 0, conflicts = 0, chain_misses = 0, docs = 0;
  uint64_t bytes = 0;
  std::map<std::string, uint64_t> error_kinds;
  const auto t0 = std::chrono::steady_clock::now();
  do {
    ++passes;
    for (const auto& d : s->namespaces()) {
      const NamespaceId ns = d.id();
      const size_t pb = d.payload_bytes();
      for (const auto& doc : s->documents(ns)) {
        if (g_stop) break;
        ++docs;
        // The chain, last block back to the first, through the parents.
        std::vector<BlockHash> chain;
        BlockHash h = doc.last_block;
        bool whole = true;
        for (uint32_t k = 0; k < doc.blocks; ++k) {
          BlockInfo bi;
          if (!s->get_block(ns, h, &bi).ok()) {
            whole = false;
            break;
          }
          chain.push_back(h);
          h = bi.parent;
        }
        if (!whole || chain.empty() || chain.back() != doc.first_block) {
          ++chain_misses;
          continue;
        }
        std::vector<std::vector<uint8_t>> buf(chain.size(), std::vector<uint8_t>(pb));
        LoadDest dest;
        for (auto& b : buf) dest.ptrs.push_back(b.data());
        auto t = s->load(ns, chain.data(), chain.size(), dest);
        (void)t->wait();
        ++loads;
        for (size_t i = 0; i < chain.size(); ++i) {
          const Status& bs = t->block_status()[i];
          if (bs.ok()) {
            ++ok;
            bytes += pb;
            const uint64_t x = fmt::xxh3(buf[i].data(), pb);
            const std::string key = to_hex(ns) + ":" + to_hex(chain[i]);
            auto [it, fresh] = digest.emplace(key, x);
            if (!fresh && it->second != x) ++conflicts;
          } else if (bs.code() == Code::kNotFound) {
            ++misses;
          } else {
            ++errors;
            ++error_kinds[std::string(code_name(bs.code())) + ": " + bs.message().substr(0, 120)];
          }
        }
      }
    }
  } while (!g_stop && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds);
  if (!digests_path.empty()) {
    std::ofstream f(digests_path);
    for (const auto& [k, v] : digest) f << k << " " << std::hex << v << std::dec << "\n";
  }
  nlohmann::json j;
  j["store"] = store;
  j["passes"] = passes;
  j["documents_seen"] = docs;
  j["loads"] = loads;
  j["blocks_ok"] = ok;
  j["bytes_ok"] = bytes;
  j["misses"] = misses;
  j["chain_misses"] = chain_misses;
  j["errors"] = errors;
  j["error_kinds"] = error_kinds;
  j["distinct_blocks"] = digest.size();
  j["wrong_bytes"] = conflicts;
  j["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s\n", j.dump().c_str());
  return conflicts ? 3 : 0;
}
