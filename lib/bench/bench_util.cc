// lib/bench/bench_util.cc: see ucm/bench/bench_util.h.
#include "ucm/bench/bench_util.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <system_error>

#include "ucm/bench/common.h"
#include "ucm/fs.h"
#include "ucm/hash.h"

namespace ucm::bench {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int pin_to_one_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(pthread_self(), sizeof set, &set) != 0) return -1;
  int cpu = -1;
  for (int c = CPU_SETSIZE - 1; c >= 0; --c) {
    if (CPU_ISSET(c, &set)) {
      cpu = c;
      break;
    }
  }
  if (cpu < 0) return -1;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) != 0) return -1;
  return cpu;
}

void make_chains(const NamespaceId& ns, uint64_t n, uint32_t chain_len, uint32_t block_size,
                 std::mt19937_64& rng, std::vector<BlockHash>* hashes,
                 std::vector<BlockHash>* parents, std::vector<uint32_t>* all_tokens) {
  hashes->clear();
  parents->clear();
  if (all_tokens) all_tokens->clear();
  hashes->reserve(n);
  parents->reserve(n);
  const BlockHash root = root_hash(ns);
  std::vector<uint32_t> tokens;
  while (hashes->size() < n) {
    uint64_t len = std::min<uint64_t>(chain_len, n - hashes->size());
    tokens.resize(len * block_size);
    for (auto& t : tokens) t = static_cast<uint32_t>(rng() % 49152);
    size_t first = hashes->size();
    hash_blocks(root, tokens.data(), tokens.size(), block_size, hashes);
    if (all_tokens) all_tokens->insert(all_tokens->end(), tokens.begin(), tokens.end());
    for (size_t i = first; i < hashes->size(); ++i) {
      parents->push_back(i == first ? root : (*hashes)[i - 1]);
    }
  }
}

NamespaceDesc payload_namespace(uint64_t block_bytes, const std::string& model_id, const std::string& name) {
  NamespaceDesc d;
  d.model_id = model_id;
  d.weights_digest = "00000000000000000000000000000000";
  d.dtype = DType::kBF16;
  d.block_size = 16;
  if (block_bytes == 368640) {
    d.num_layers = 30;
    d.num_kv_heads = 3;
    d.head_dim = 64;
  } else {
    d.num_layers = 1;
    d.num_kv_heads = 1;
    d.head_dim = static_cast<uint32_t>(block_bytes / 64);
  }
  d.name = name;
  return d;
}

bool BenchTargets::all_pass() const {
  return std::all_of(targets.begin(), targets.end(), [](const Target& t) { return t.pass; });
}

std::string bench_store_path(const BenchStore& s, const std::string& prefix) {
  if (s.keep && !s.dir.empty()) return s.dir;
  std::string base = s.dir;
  if (base.empty()) {
    const char* t = std::getenv("TMPDIR");
    base = (t && *t) ? t : ".";
  }
  return (std::filesystem::path(base) / (prefix + std::to_string(::getpid()))).string();
}

RemoveGuard::~RemoveGuard() {
  if (armed && !path.empty()) {
    std::error_code ec;
    ucm::remove_tree(path, ec);
  }
}

}  // namespace ucm::bench
