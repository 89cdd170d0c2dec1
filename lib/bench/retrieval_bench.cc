// bench/retrieval_bench.cc: `ucm bench retrieval` (see retrieval_bench.h).
#include "ucm/bench/retrieval_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ucm/half.h"
#include "ucm/core/retrieval/kernels.h"
#include "ucm/core/retrieval/params.h"
#include "ucm/core/retrieval/retriever.h"

namespace ucm::bench {
namespace {

using Clock = std::chrono::steady_clock;
double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// xorshift64*: fast, deterministic synthetic data.
struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ull;
  }
  float normalish() {  // sum of 4 uniforms, centred: mean 0, variance 1/3
    float a = 0;
    for (int i = 0; i < 4; ++i) a += float(next() >> 40) * (1.0f / 16777216.0f);
    return a - 2.0f;
  }
};

std::string isa_name() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (__builtin_cpu_supports("x86-64-v4")) return "x86-64-v4";
  if (__builtin_cpu_supports("x86-64-v3")) return "x86-64-v3";
  if (__builtin_cpu_supports("popcnt")) return "popcnt";
  return "x86-64";
#else
  return "generic";
#endif
}

double memcpy_gbps(uint64_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    a[size_t(i)] = char(i);
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    best = std::min(best, secs(t0, Clock::now()));
  }
  volatile char sink = b[bytes / 2];
  (void)sink;
  return double(bytes) / best / 1e9;
}

// One request's synthetic representations (every layer) and the queries of a few steps.
struct Synthetic {
  uint32_t L, H, D, T, B, Q;
  size_t C;
  std::vector<uint16_t> r0, r1;  // bf16
  std::vector<uint8_t> r4;
  std::vector<float> proj, queries;  // queries: [kSteps][L][Q][D]
  static constexpr int kSteps = 4;
  Synthetic(const RetrievalBenchOptions& o, size_t c, Rng& rng)
      : L(o.layers), H(o.kv_heads), D(o.head_dim), T(o.block_size), B(o.hash_bits), Q(o.q_heads), C(c) {
    const size_t rows = size_t{L} * H * C;
    r0.resize(rows * D);
    r1.resize(rows * 2 * D);
    for (size_t r = 0; r < rows; ++r)
      for (uint32_t d = 0; d < D; ++d) {
        const float m = rng.normalish();
        const float w = std::fabs(rng.normalish()) + 0.1f;
        r0[r * D + d] = f32_to_bf16(m);
        r1[r * 2 * D + d] = f32_to_bf16(m - w);
        r1[r * 2 * D + D + d] = f32_to_bf16(m + w);
      }
    r4.resize(rows * T * (B / 8));
    for (size_t i = 0; i < r4.size(); i += 8) {
      const uint64_t v = rng.next();
      std::memcpy(r4.data() + i, &v, std::min<size_t>(8, r4.size() - i));
    }
    proj.resize(size_t{L} * H * D * B);
    for (auto& p : proj) p = rng.normalish();
    queries.resize(size_t{kSteps} * L * Q * D);
    for (auto& q : queries) q = rng.normalish();
  }
  ucm_repr_buffers buffers() {
    ucm_repr_buffers b{};
    b.struct_size = sizeof(b);
    b.dtype = UCM_DTYPE_BF16;
    b.capacity = C;
    b.r0 = r0.data();
    b.r1 = r1.data();
    b.r4 = r4.data();
    return b;
  }
  ucm_repr_info info() const {
    ucm_repr_info i{};
    i.struct_size = sizeof(i);
    i.num_layers = L;
    i.num_kv_heads = H;
    i.head_dim = D;
    i.block_size = T;
    i.hash_bits = B;
    i.dtype = UCM_DTYPE_BF16;
    i.sections = UCM_REPR_R0 | UCM_REPR_R1 | UCM_REPR_R4;
    return i;
  }
  const float* q(int step, uint32_t l) const { return queries.data() + (size_t(step % kSteps) * L + l) * Q * D; }
};

uint64_t layer_bytes(int policy, const Synthetic& s) {
  const uint64_t hc = uint64_t{s.H} * s.C;
  if (policy == UCM_POLICY_ESA) return hc * s.D * 2;
  if (policy == UCM_POLICY_GSA) return hc * s.T * (s.B / 8);
  return hc * 2 * s.D * 2;
}

Status time_select(int policy, Synthetic& s, double min_s, RetrievalFigure* f) {
  ucm_retriever_params p = retrieval::default_params();
  p.policy = policy;
  p.honor_dense_layers = 0;
  const ucm_repr_info info = s.info();
  std::unique_ptr<retrieval::Retriever> r;
  UCM_RETURN_IF_ERROR(retrieval::Retriever::Create(p, info, s.proj.data(), &r));
  const ucm_repr_buffers bufs = s.buffers();
  std::vector<uint32_t> idx(size_t{s.H} * s.C), counts(s.H);
  uint64_t steps = 0, sets = 0, selected = 0;
  const auto t0 = Clock::now();
  double el = 0;
  while (steps < 3 || el < min_s) {
    for (uint32_t l = 0; l < s.L; ++l) {
      ucm_retrieval_query q{sizeof(q), l, s.q(int(steps), l), UCM_DTYPE_F32, s.Q, s.Q / s.H, &bufs, s.C, nullptr, 0};
      uint32_t ns = 0;
      UCM_RETURN_IF_ERROR(r->select(q, idx.data(), s.C, counts.data(), &ns));
      for (uint32_t k = 0; k < ns; ++k) selected += counts[k];
      sets += ns;
    }
    ++steps;
    el = secs(t0, Clock::now());
  }
  f->steps = steps;
  f->select_us = el * 1e6 / double(steps * s.L);
  f->mean_selected = sets ? double(selected) / double(sets) : 0;
  return Status::OK();
}

void time_scan(int policy, Synthetic& s, double min_s, RetrievalFigure* f) {
  const uint32_t G = s.Q / s.H, D = s.D, Bb = s.B / 8;
  std::vector<float> out(size_t{G} * s.C), tmp(s.B);
  std::vector<uint8_t> code(Bb);
  uint64_t layers = 0;
  const auto t0 = Clock::now();
  double el = 0;
  while (layers < 3 * s.L || el < min_s) {
    const uint32_t l = uint32_t(layers % s.L);
    for (uint32_t h = 0; h < s.H; ++h) {
      const size_t row0 = (size_t{l} * s.H + h) * s.C;
      const float* q = s.q(int(layers / s.L), l) + size_t{h} * G * D;
      if (policy == UCM_POLICY_ESA)
        retrieval::dot_scores(s.r0.data() + row0 * D, UCM_DTYPE_BF16, s.C, D, q, G, out.data());
      else if (policy == UCM_POLICY_GSA) {
        retrieval::sign_hash(q, s.proj.data() + (size_t{l} * s.H + h) * D * s.B, D, s.B, tmp.data(), code.data());
        retrieval::hamming_scores(s.r4.data() + row0 * s.T * Bb, s.C, s.T, Bb, code.data(), out.data());
      } else
        retrieval::bound_scores(s.r1.data() + row0 * 2 * D, UCM_DTYPE_BF16, s.C, D, q, G, out.data());
    }
    ++layers;
    el = secs(t0, Clock::now());
  }
  f->scan_us = el * 1e6 / double(layers);
}

}  // namespace

Status run_retrieval_bench(const RetrievalBenchOptions& o, RetrievalBenchReport* rep) {
  if (o.kv_heads == 0 || o.q_heads % o.kv_heads != 0 || o.q_heads == 0)
    return Status::InvalidArgument("bench retrieval: q_heads must be a positive multiple of kv_heads");
  if (o.hash_bits == 0 || o.hash_bits % 8 != 0)
    return Status::InvalidArgument("bench retrieval: hash_bits must be a positive multiple of 8");
  if (o.contexts.empty() || o.layers == 0 || o.head_dim == 0 || o.block_size == 0)
    return Status::InvalidArgument("bench retrieval: empty context list or zero dimension");
  *rep = RetrievalBenchReport{};
  rep->options = o;
  rep->options.progress = nullptr;
  rep->isa = isa_name();
  auto say = [&](const std::string& m) {
    if (o.progress) o.progress(m);
  };
  say("memcpy of " + std::to_string(o.memcpy_bytes >> 20) + " MiB");
  rep->memcpy_gbps = memcpy_gbps(o.memcpy_bytes);
  Rng rng{o.seed * 0x9E3779B97F4A7C15ull + 1};
  for (uint64_t c : o.contexts) {
    say("synthetic representations of " + std::to_string(c) + " blocks");
    Synthetic s(o, size_t(c), rng);
    for (int pol : {UCM_POLICY_ESA, UCM_POLICY_QUEST, UCM_POLICY_GSA, UCM_POLICY_PSA}) {
      RetrievalFigure f;
      f.policy = retrieval::policy_name(pol);
      f.blocks = c;
      f.layer_bytes = layer_bytes(pol, s);
      say(f.policy + " @ " + std::to_string(c) + " blocks");
      time_scan(pol, s, o.min_seconds, &f);
      UCM_RETURN_IF_ERROR(time_select(pol, s, o.min_seconds, &f));
      rep->figures.push_back(f);
      if (pol == UCM_POLICY_ESA || pol == UCM_POLICY_QUEST) {
        Target t;
        t.name = f.policy + " scan @ " + std::to_string(c) + " blocks";
        t.rule = "scan >= 0.50 x memcpy";
        t.threshold = 0.5;
        t.value = rep->memcpy_gbps > 0 ? f.scan_gbps() / rep->memcpy_gbps : 0;
        t.pass = t.value >= t.threshold;
        rep->targets.push_back(t);
      }
    }
  }
  return Status::OK();
}

std::string RetrievalBenchReport::to_json() const {
  nlohmann::ordered_json j;
  const auto& o = options;
  j["shape"] = {{"layers", o.layers},         {"kv_heads", o.kv_heads},     {"q_heads", o.q_heads},
                {"head_dim", o.head_dim},     {"block_size", o.block_size}, {"hash_bits", o.hash_bits},
                {"dtype", "bf16"}};
  j["isa"] = isa;
  j["memcpy_bytes"] = o.memcpy_bytes;
  j["memcpy_gbps"] = memcpy_gbps;
  j["figures"] = nlohmann::ordered_json::array();
  for (const auto& f : figures)
    j["figures"].push_back({{"policy", f.policy},
                            {"blocks", f.blocks},
                            {"tokens", f.blocks * o.block_size},
                            {"layer_bytes", f.layer_bytes},
                            {"steps", f.steps},
                            {"select_us", f.select_us},
                            {"select_gbps", f.select_gbps()},
                            {"scan_us", f.scan_us},
                            {"scan_gbps", f.scan_gbps()},
                            {"scan_vs_memcpy", memcpy_gbps > 0 ? f.scan_gbps() / memcpy_gbps : 0},
                            {"mean_selected_blocks", f.mean_selected}});
  j["targets"] = nlohmann::ordered_json::array();
  for (const auto& t : targets)
    j["targets"].push_back({{"name", t.name}, {"rule", t.rule}, {"value", t.value}, {"threshold", t.threshold}, {"pass", t.pass}});
  j["all_pass"] = all_pass();
  return j.dump(2);
}

std::string RetrievalBenchReport::to_text() const {
  std::ostringstream s;
  char line[256];
  std::snprintf(line, sizeof line, "retrieval bench: L=%u H=%u q_heads=%u D=%u T=%u B=%u bf16, kernels %s\n",
                options.layers, options.kv_heads, options.q_heads, options.head_dim, options.block_size,
                options.hash_bits, isa.c_str());
  s << line;
  std::snprintf(line, sizeof line, "memcpy: %.2f GB/s (%llu MiB)\n\n", memcpy_gbps,
                (unsigned long long)(options.memcpy_bytes >> 20));
  s << line;
  s << "policy  blocks  tokens   bytes/layer  select us/layer  select GB/s  scan us/layer  scan GB/s  scan/memcpy  mean blocks\n";
  for (const auto& f : figures) {
    std::snprintf(line, sizeof line, "%-6s  %6llu  %7llu  %11llu  %15.1f  %11.2f  %13.1f  %9.2f  %11.2f  %11.1f\n",
                  f.policy.c_str(), (unsigned long long)f.blocks, (unsigned long long)(f.blocks * options.block_size),
                  (unsigned long long)f.layer_bytes, f.select_us, f.select_gbps(), f.scan_us, f.scan_gbps(),
                  memcpy_gbps > 0 ? f.scan_gbps() / memcpy_gbps : 0, f.mean_selected);
    s << line;
  }
  s << "\n";
  for (const auto& t : targets) {
    std::snprintf(line, sizeof line, "target %-26s %s: %.2f %s\n", t.name.c_str(), t.rule.c_str(), t.value,
                  t.pass ? "PASS" : "MISS");
    s << line;
  }
  return s.str();
}

}  // namespace ucm::bench
