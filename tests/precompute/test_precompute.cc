// test_precompute: `ucm precompute` end to end on the real model (SmolLM2-135M-Instruct) and three
// small real documents of the default corpus (Python 3.11 docs), plus synthetic checks of the
// representation encoder, the projection, config parsing and bad input.
//
// Model dir: $UCM_MODEL_DIR or <repo>/models/SmolLM2-135M-Instruct (run scripts/fetch_model.py).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "ucm/model/llama_model.h"
#include "ucm/admin.h"
#include "ucm/hash.h"
#include "ucm/precompute/precompute.h"
#include "ucm/namespace_match.h"
#include "ucm/precompute/repr.h"
#include "ucm/store.h"
#include "ucm/tok/tokenizer.h"
#include "real_data.h"

namespace fs = std::filesystem;
using namespace ucm;
using namespace ucm::precompute;

using ucm::test::model_dir;
using ucm::test::model_missing;
using ucm::test::read_file;
using ucm::test::kDocsDir;

namespace {

// filesys: > 256 tokens with the template (cut at --max-doc-tokens 256); windows: < 128 tokens.
const std::vector<std::string> kDocNames = {"filesys.rst.txt", "numeric.rst.txt", "windows.rst.txt"};
const std::string kPrefix =
    "<|im_start|>system\nYou are a helpful assistant. Answer using the document below.<|im_end|>\n"
    "<|im_start|>user\n";



fs::path make_tmp(const std::string& tag) {
  fs::path p = fs::temp_directory_path() / ("ucm-test-precompute-" + tag + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Decoded BLOCK_REPR payload (independent of the encoder: reads the table as specified).
struct Repr {
  std::map<uint32_t, std::pair<uint32_t, std::string>> sections;  // kind -> (dtype, bytes)
};
bool decode_repr(const std::string& p, Repr* r) {
  if (p.size() < 8 || std::memcmp(p.data(), "UCMP", 4) != 0) return false;
  uint32_t n;
  std::memcpy(&n, p.data() + 4, 4);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t kind, dt;
    uint64_t off, len;
    const char* e = p.data() + 8 + 24 * i;
    std::memcpy(&kind, e, 4);
    std::memcpy(&dt, e + 4, 4);
    std::memcpy(&off, e + 8, 8);
    std::memcpy(&len, e + 16, 8);
    if (off % 64 != 0 || off + len > p.size()) return false;
    r->sections[kind] = {dt, p.substr(off, len)};
  }
  return true;
}
float bf16f(const std::string& s, size_t i) {
  uint16_t b;
  std::memcpy(&b, s.data() + 2 * i, 2);
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t to_bf16_torch(float x) {
  auto t = torch::tensor({x}).to(torch::kBFloat16);
  uint16_t b;
  std::memcpy(&b, t.data_ptr(), 2);
  return b;
}

uint16_t to_f16_torch(float x) {
  auto t = torch::tensor({x}).to(torch::kHalf);
  uint16_t b;
  std::memcpy(&b, t.data_ptr(), 2);
  return b;
}

class PrecomputeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    missing_ = model_missing();
    if (!missing_.empty()) return;
    const std::string dir = model_dir();
    torch::set_num_threads(2);
    model_ = model::LlamaModel::load(dir).release();
    tok_ = new tok::Tokenizer(tok::Tokenizer::from_file((fs::path(dir) / "tokenizer.json").string()));
    root_ = make_tmp("suite");
    corpus_ = root_ / "corpus";
    fs::create_directories(corpus_);
    for (const auto& n : kDocNames) fs::copy_file(fs::path(kDocsDir) / n, corpus_ / n);
    tmpl_ = root_ / "template.txt";
    std::ofstream(tmpl_) << kPrefix;
    // The main run: every doc alone in its batch (so the test's single forward has the same shape).
    PrecomputeOptions o = base_options(root_ / "storeA");
    summary_ = new PrecomputeSummary;
    Status st = run_precompute(o, Resources{model_, tok_}, summary_);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  static void TearDownTestSuite() {
    if (!root_.empty()) fs::remove_all(root_);
  }
  void SetUp() override {
    if (!missing_.empty()) FAIL() << missing_;
  }

  static PrecomputeOptions base_options(const fs::path& store) {
    PrecomputeOptions o;
    o.model_dir = model_dir();
    o.corpus = corpus_.string();
    o.store = store.string();
    o.template_file = tmpl_.string();
    o.max_doc_tokens = 256;
    o.batch_tokens = 256;
    o.handle_signals = false;
    return o;
  }
  static std::unique_ptr<Store> open_ro(const fs::path& p) {
    OpenOptions oo;
    oo.refresh_interval_ms = 0;
    std::unique_ptr<Store> s;
    Status st = Store::Open(p.string(), oo, &s);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return s;
  }
  static NamespaceId ns_of(Store* s) {
    auto v = s->namespaces();
    EXPECT_EQ(v.size(), 1u);
    return v.empty() ? NamespaceId{} : v[0].id();
  }
  // Token ids precompute stores for a doc: template prefix + text, cut at 256, full blocks only.
  static std::vector<int32_t> stored_ids(const std::string& name) {
    auto ids = tok_->encode(kPrefix + read_file(corpus_ / name));
    if (ids.size() > 256) ids.resize(256);
    ids.resize(ids.size() - ids.size() % 16);
    return ids;
  }

  static inline model::LlamaModel* model_ = nullptr;
  static inline tok::Tokenizer* tok_ = nullptr;
  static inline fs::path root_, corpus_, tmpl_;
  static inline PrecomputeSummary* summary_ = nullptr;
  static inline std::string missing_;
};

TEST_F(PrecomputeTest, SummaryAndBlockCounts) {
  EXPECT_EQ(summary_->documents, kDocNames.size());
  auto s = open_ro(root_ / "storeA");
  uint64_t truncated = 0;
  NamespaceId ns = ns_of(s.get());
  uint64_t tokens = 0, blocks = 0;
  for (const auto& n : kDocNames) {
    DocumentEntry e;
    ASSERT_TRUE(s->get_document(ns, n, &e).ok()) << n;
    auto full = tok_->encode(kPrefix + read_file(corpus_ / n));
    const uint64_t expect_tokens = std::min<uint64_t>(full.size(), 256);
    truncated += full.size() > 256;
    EXPECT_EQ(e.blocks, expect_tokens / 16) << n;
    EXPECT_EQ(e.tokens, uint64_t(e.blocks) * 16) << n;
    EXPECT_EQ(e.source, (corpus_ / n).string());
    tokens += e.tokens;
    blocks += e.blocks;
  }
  EXPECT_EQ(summary_->tokens, tokens);
  EXPECT_EQ(summary_->truncated, truncated);
  // The template prefix (>= 16 tokens) makes the first block shared by all three documents.
  EXPECT_EQ(summary_->blocks_written + summary_->blocks_existing, blocks);
  EXPECT_EQ(summary_->blocks_written, blocks - (kDocNames.size() - 1));
}

TEST_F(PrecomputeTest, HashesEqualLibraryChainOverTemplatePlusDocument) {
  auto s = open_ro(root_ / "storeA");
  NamespaceId ns = ns_of(s.get());
  for (const auto& n : kDocNames) {
    auto ids = stored_ids(n);
    std::vector<BlockHash> h;
    hash_blocks(root_hash(ns), reinterpret_cast<const uint32_t*>(ids.data()), ids.size(), 16, &h);
    DocumentEntry e;
    ASSERT_TRUE(s->get_document(ns, n, &e).ok());
    EXPECT_EQ(e.first_block, h.front());
    EXPECT_EQ(e.last_block, h.back());
    std::vector<uint8_t> present(h.size());
    size_t prefix = 0;
    ASSERT_TRUE(s->lookup(ns, h.data(), h.size(), present.data(), &prefix).ok());
    EXPECT_EQ(prefix, h.size()) << n;
    for (size_t i = 0; i < h.size(); ++i) {
      BlockInfo bi;
      ASSERT_TRUE(s->get_block(ns, h[i], &bi).ok());
      EXPECT_EQ(bi.parent, i ? h[i - 1] : root_hash(ns));
      EXPECT_EQ(bi.token_count, 16u);
      EXPECT_TRUE(bi.has_repr);
    }
  }
}

TEST_F(PrecomputeTest, PayloadAndReprsMatchRunner) {
  auto s = open_ro(root_ / "storeA");
  NamespaceId ns = ns_of(s.get());
  NamespaceDesc desc;
  NamespaceId id;
  ASSERT_TRUE(s->find_namespace(to_hex(ns), &desc, &id).ok());
  const int64_t L = model_->config().num_hidden_layers, H = model_->config().num_key_value_heads,
                D = model_->config().head_dim;
  const uint32_t NB = 128;
  EXPECT_EQ(desc.num_layers, uint32_t(L));
  EXPECT_EQ(desc.dtype, DType::kBF16);
  std::string proj;
  ASSERT_TRUE(s->get_attachment(ns, "r4_projection", &proj).ok());
  ASSERT_EQ(proj.size(), size_t(L * H * D * NB * 4));
  const float* P = reinterpret_cast<const float*>(proj.data());

  const std::string name = "numeric.rst.txt";
  auto ids = stored_ids(name);
  const int64_t T = int64_t(ids.size());
  std::vector<BlockHash> h;
  hash_blocks(root_hash(ns), reinterpret_cast<const uint32_t*>(ids.data()), ids.size(), 16, &h);
  auto tokens = torch::empty({1, T}, torch::kInt64);
  for (int64_t t = 0; t < T; ++t) tokens[0][t] = ids[size_t(t)];
  auto out = model_->forward(tokens, torch::tensor({T}, torch::kInt64), false, torch::kBFloat16);

  const size_t payload = desc.payload_bytes();
  std::vector<std::string> bufs(h.size(), std::string(payload, '\0'));
  LoadDest dest;
  for (auto& b : bufs) dest.ptrs.push_back(b.data());
  ASSERT_TRUE(s->load(ns, h.data(), h.size(), dest)->wait().ok());
  std::vector<std::string> reprs(h.size(), std::string(1 << 20, '\0'));
  std::vector<void*> rp;
  std::vector<size_t> cap;
  for (auto& r : reprs) {
    rp.push_back(r.data());
    cap.push_back(r.size());
  }
  ASSERT_TRUE(s->load_repr(ns, h.data(), h.size(), rp.data(), cap.data())->wait().ok());

  // The store's bytes come from precompute's forward pass; `out` is a second pass of the same
  // model over the same tokens. Two passes agree only up to fp32 rounding: the BLAS kernels and
  // the split over threads depend on the batch shape and on how busy the machine is (about 1e-6
  // here; see TwoForwardPassesDifferOnlyByRounding). So the comparisons against `out` allow half
  // a bf16 ulp plus that much. The guarantees that matter are exact: the R1 bounds hold for the
  // keys the store serves (below), and for the fp32 keys of the pass that produced them
  // (ReprIsExactForTheKeysOfItsOwnPass).
  // got (bf16) vs want (fp32 of the other pass): half a bf16 step of want, plus the passes'
  // difference, relative to `scale` (the magnitude of the values want was computed from).
  const auto near = [](float got, float want, float scale) {
    // want is itself rounded to bf16 (the reference pass reads K/V as a bf16 cache, like
    // precompute), so a last-bit fp32 difference between the passes can put the two one bf16
    // step apart: allow one step (|want| / 128) instead of half.
    return std::fabs(got - want) <= std::fabs(want) / 128 + std::fabs(scale) * 1e-4f + 1e-6f;
  };
  size_t bit_mismatch = 0, bits_total = 0, exact = 0, compared = 0;
  for (size_t blk = 0; blk < h.size(); ++blk) {
    // Payload: layers 0 and L-1, K and V, tokens 0, 7, 15 of the block, every head and dim.
    // Layer 0 only: both passes compute its K/V from the same embeddings. Deeper layers read K/V
    // rounded to bf16 (as a bf16 server's cache holds them), so a last-bit fp32 difference between
    // the passes' batch shapes can flip a rounding that later layers amplify (several bf16 steps
    // at layer 29); for those layers the exact checks (served keys within R1, and
    // ReprIsExactForTheKeysOfItsOwnPass) are what holds.
    for (int64_t l : {int64_t(0)})
      for (int kv = 0; kv < 2; ++kv) {
        auto ref = (kv == 0 ? out.k : out.v)[size_t(l)].to(torch::kFloat).contiguous();  // bf16 -> fp32, exact
        const float* r = ref.data_ptr<float>();
        for (int64_t t : {0, 7, 15})
          for (int64_t hd = 0; hd < H * D; ++hd) {
            const int64_t tok = int64_t(blk) * 16 + t;
            const float got = bf16f(bufs[blk], size_t((((l * 2 + kv) * 16 + t) * H * D) + hd));
            const float want = r[tok * H * D + hd];
            ASSERT_TRUE(near(got, want, want)) << got << " vs " << want << ": block " << blk << " layer " << l << " kv "
                                         << kv << " t " << t;
            ++compared;
            exact += to_bf16_torch(want) == to_bf16_torch(got);
          }
      }
    BlockInfo bi;
    ASSERT_TRUE(s->get_block(ns, h[blk], &bi).ok());
    Repr rep;
    ASSERT_TRUE(decode_repr(reprs[blk].substr(0, bi.repr_length), &rep));
    ASSERT_EQ(rep.sections.size(), 3u);
    const auto& r0 = rep.sections[0];
    const auto& r1 = rep.sections[1];
    const auto& r4 = rep.sections[4];
    EXPECT_EQ(r0.first, 1u);
    EXPECT_EQ(r1.first, 1u);
    EXPECT_EQ(r4.first, 4u);
    ASSERT_EQ(r0.second.size(), size_t(L * H * D * 2));
    ASSERT_EQ(r1.second.size(), size_t(L * 2 * H * D * 2));
    ASSERT_EQ(r4.second.size(), size_t(L * H * 16 * NB / 8));
    for (int64_t l = 0; l < L; ++l) {
      auto k = out.k[size_t(l)].to(torch::kFloat).contiguous();  // bf16, as the store's payload
      const float* kp = k.data_ptr<float>();
      for (int64_t hh = 0; hh < H; ++hh) {
        for (int64_t d = 0; d < D; ++d) {
          const float smin = bf16f(r1.second, size_t(((l * 2 + 0) * H + hh) * D + d));
          const float smax = bf16f(r1.second, size_t(((l * 2 + 1) * H + hh) * D + d));
          // Exact: the bounds hold for every key the store serves (K of this block, all tokens).
          for (int64_t t = 0; t < 16; ++t) {
            const float served = bf16f(bufs[blk], size_t((((l * 2 + 0) * 16 + t) * H + hh) * D + d));
            ASSERT_LE(smin, served) << "R1 min above a served key: l" << l << " h" << hh << " d" << d << " t" << t;
            ASSERT_GE(smax, served) << "R1 max below a served key: l" << l << " h" << hh << " d" << d << " t" << t;
          }
          // Against the second pass (layer 0, see above): the mean, and the bounds up to that
          // pass's rounding.
          if (l > 0) continue;
          double sum = 0;
          float mn = INFINITY, mx = -INFINITY;
          for (int64_t t = 0; t < 16; ++t) {
            const float v = kp[((int64_t(blk) * 16 + t) * H + hh) * D + d];
            sum += v;
            mn = std::min(mn, v);
            mx = std::max(mx, v);
          }
          const float r0v = bf16f(r0.second, size_t((l * H + hh) * D + d));
          ASSERT_TRUE(near(r0v, float(sum / 16), std::max(std::fabs(mn), std::fabs(mx))))
              << r0v << " vs " << sum / 16 << ": R0 l" << l << " h" << hh << " d" << d;
          const float tol_mn = std::fabs(mn) * 1e-4f + 1e-6f, tol_mx = std::fabs(mx) * 1e-4f + 1e-6f;
          ASSERT_LE(smin, mn + tol_mn);
          ASSERT_GE(smax, mx - tol_mx);
          // ... and they are tight: within one bf16 step of the extremes.
          ASSERT_LE(mn - smin, std::fabs(mn) * (1.0f / 128) + tol_mn);
          ASSERT_LE(smax - mx, std::fabs(mx) * (1.0f / 128) + tol_mx);
        }
        if (l > 0) continue;  // R4 against the second pass: layer 0 (see above)
        for (int64_t t = 0; t < 16; ++t) {
          const float* kt = kp + ((int64_t(blk) * 16 + t) * H + hh) * D;
          double norm = 0;
          for (int64_t d = 0; d < D; ++d) norm += double(kt[d]) * kt[d];
          for (uint32_t j = 0; j < NB; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += double(kt[d]) * P[((l * H + hh) * D + d) * NB + j];
            const uint8_t byte = uint8_t(r4.second[size_t(((l * H + hh) * 16 + t) * (NB / 8) + j / 8)]);
            const bool bit = (byte >> (j % 8)) & 1;
            ++bits_total;
            if (bit != (dot >= 0)) {
              ++bit_mismatch;
              // fp32 vs double rounding (and the other pass) may flip only a dot product that is ~0
              ASSERT_LT(std::fabs(dot), 1e-5 * std::sqrt(norm)) << "R4 l" << l << " h" << hh << " t" << t << " j" << j;
            }
          }
        }
      }
    }
  }
  EXPECT_LE(bit_mismatch, bits_total / 100000 + 1);
  // Nearly all payload values round to the same bf16 in both passes (a few flip at a rounding
  // boundary); recorded for the log.
  RecordProperty("payload_values_compared", int(compared));
  RecordProperty("payload_values_bit_identical", int(exact));
  EXPECT_GE(exact * 100, compared * 99) << exact << " of " << compared << " identical: more than rounding";
}

// The pass that produces the representations also produces the keys they describe: encoded from
// that pass's fp32 keys (what precompute does for every block), R0 and R1 are exact.
TEST_F(PrecomputeTest, ReprIsExactForTheKeysOfItsOwnPass) {
  auto s = open_ro(root_ / "storeA");
  const NamespaceId ns = ns_of(s.get());
  NamespaceDesc desc;
  NamespaceId id;
  ASSERT_TRUE(s->find_namespace(to_hex(ns), &desc, &id).ok());
  const int64_t L = desc.num_layers, H = desc.num_kv_heads, D = desc.head_dim;
  const uint32_t NB = 128;
  std::string proj;
  ASSERT_TRUE(s->get_attachment(ns, "r4_projection", &proj).ok());
  const float* P = reinterpret_cast<const float*>(proj.data());
  auto ids = stored_ids("numeric.rst.txt");
  const int64_t T = int64_t(ids.size());
  auto tokens = torch::empty({1, T}, torch::kInt64);
  for (int64_t t = 0; t < T; ++t) tokens[0][t] = ids[size_t(t)];
  auto out = model_->forward(tokens, torch::tensor({T}, torch::kInt64), false, torch::kBFloat16);
  std::vector<torch::Tensor> k(static_cast<size_t>(L));
  for (int64_t l = 0; l < L; ++l) k[size_t(l)] = out.k[size_t(l)].to(torch::kFloat).contiguous();
  const ReprSpec spec{uint32_t(L), uint32_t(H), uint32_t(D), 16, NB, DType::kBF16};
  for (int64_t blk = 0; blk < T / 16; ++blk) {
    std::vector<const float*> kp;
    for (int64_t l = 0; l < L; ++l) kp.push_back(k[size_t(l)].data_ptr<float>() + blk * 16 * H * D);
    std::string enc;
    encode_block_repr(spec, kp.data(), size_t(H * D), nullptr, 0, P, &enc);
    Repr rep;
    ASSERT_TRUE(decode_repr(enc, &rep));
    const auto& r0 = rep.sections[0].second;
    const auto& r1 = rep.sections[1].second;
    for (int64_t l = 0; l < L; ++l)
      for (int64_t hh = 0; hh < H; ++hh)
        for (int64_t d = 0; d < D; ++d) {
          double sum = 0;
          float mn = INFINITY, mx = -INFINITY;
          for (int64_t t = 0; t < 16; ++t) {
            const float v = kp[size_t(l)][(t * H + hh) * D + d];
            sum += v;
            mn = std::min(mn, v);
            mx = std::max(mx, v);
          }
          const size_t i0 = size_t((l * H + hh) * D + d);
          uint16_t got0;
          std::memcpy(&got0, r0.data() + i0 * 2, 2);
          ASSERT_EQ(got0, to_bf16_torch(float(sum / 16))) << "R0 l" << l << " h" << hh << " d" << d;
          const float smin = bf16f(r1, size_t(((l * 2 + 0) * H + hh) * D + d));
          const float smax = bf16f(r1, size_t(((l * 2 + 1) * H + hh) * D + d));
          ASSERT_LE(smin, mn);
          ASSERT_GE(smax, mx);
          // The tightest bf16 values that hold: one step further in would cut off a key.
          ASSERT_EQ(smin, bf16_to_float(bf16_round_down(mn)));
          ASSERT_EQ(smax, bf16_to_float(bf16_round_up(mx)));
        }
  }
}

// Confirms the cause of the old PayloadAndReprsMatchRunner failure (R1 max -0.121582 below a
// second pass's key -0.121581 on another machine): two forward passes over the same tokens, with a
// different batch shape, give keys that differ by fp32 rounding, not more.
TEST_F(PrecomputeTest, TwoForwardPassesDifferOnlyByRounding) {
  auto ids = stored_ids("numeric.rst.txt");
  const int64_t T = int64_t(ids.size());
  auto one = torch::empty({1, T}, torch::kInt64);
  for (int64_t t = 0; t < T; ++t) one[0][t] = ids[size_t(t)];
  auto a = model_->forward(one, torch::tensor({T}, torch::kInt64), false);
  // The same sequence as row 1 of a batch of 2, beside a longer padded row.
  auto two = torch::full({2, T + 32}, 2, torch::kInt64);
  two[0].copy_(torch::arange(100, 100 + T + 32, torch::kInt64));
  two[1].narrow(0, 0, T).copy_(one[0]);
  auto b = model_->forward(two, torch::tensor({T + 32, T}, torch::kInt64), false);
  double worst = 0, scale = 0;
  for (size_t l = 0; l < a.k.size(); ++l) {
    worst = std::max(worst, (a.k[l][0] - b.k[l][1].narrow(0, 0, T)).abs().max().item<double>());
    scale = std::max(scale, a.k[l].abs().max().item<double>());
  }
  RecordProperty("max_abs_key_difference_e9", int(worst * 1e9));
  std::printf("two passes: max |dK| = %.3g (max |K| = %.3g)\n", worst, scale);
  EXPECT_LE(worst, 1e-4 * scale) << "more than rounding";
}

// The r4_projection recipe (store_v1.md §7.3) with LAPACK's QR (torch::linalg_qr, double): the
// independent reference for libucm's Householder QR.
std::vector<float> lapack_projection(uint32_t L, uint32_t H, uint32_t D, uint32_t B, uint64_t seed) {
  std::vector<float> P(size_t{L} * H * D * B);
  std::mt19937_64 rng(seed);
  const double two_pi = 6.283185307179586476925286766559, inv53 = 1.0 / 9007199254740992.0;
  std::vector<double> normals;
  auto gauss = [&]() {
    if (normals.empty()) {
      const double u1 = double((rng() >> 11) + 1) * inv53, u2 = double(rng() >> 11) * inv53;
      const double r = std::sqrt(-2.0 * std::log(u1));
      normals = {r * std::sin(two_pi * u2), r * std::cos(two_pi * u2)};  // popped from the back: cos first
    }
    const double x = normals.back();
    normals.pop_back();
    return x;
  };
  torch::NoGradGuard ng;
  for (uint32_t lh = 0; lh < L * H; ++lh)
    for (uint32_t c = 0; c < (B + D - 1) / D; ++c) {
      auto G = torch::empty({D, D}, torch::kFloat64);
      for (int64_t i = 0; i < int64_t(D) * D; ++i) G.data_ptr<double>()[i] = gauss();
      auto [Q, R] = torch::linalg_qr(G, "reduced");
      auto sgn = torch::sign(torch::diagonal(R));
      Q = (Q * torch::where(sgn == 0, torch::ones_like(sgn), sgn).unsqueeze(0)).contiguous();
      for (uint32_t j = c * D; j < std::min(B, (c + 1) * D); ++j)
        for (uint32_t d = 0; d < D; ++d)
          P[(size_t{lh} * D + d) * B + j] = float(Q.data_ptr<double>()[size_t{d} * D + (j - c * D)]);
    }
  return P;
}

TEST_F(PrecomputeTest, ProjectionIsOrthogonalAndDeterministic) {
  auto s = open_ro(root_ / "storeA");
  NamespaceId ns = ns_of(s.get());
  std::string proj;
  ASSERT_TRUE(s->get_attachment(ns, "r4_projection", &proj).ok());
  const auto& c = model_->config();
  auto P = ucm::r4_projection(uint32_t(c.num_hidden_layers), uint32_t(c.num_key_value_heads), uint32_t(c.head_dim), 128,
                           PrecomputeOptions{}.fingerprint.projection_seed);
  ASSERT_EQ(proj.size(), P.size() * 4);
  EXPECT_EQ(std::memcmp(proj.data(), P.data(), proj.size()), 0);
  const int64_t D = c.head_dim, NB = 128;
  auto t = torch::from_blob(P.data(), {c.num_hidden_layers * c.num_key_value_heads, D, NB}, torch::kFloat32);
  for (int64_t blk = 0; blk < NB / D; ++blk) {
    auto Q = t.narrow(2, blk * D, D).to(torch::kFloat64);  // [LH, D, D]
    auto I = torch::matmul(Q.transpose(1, 2), Q);
    auto err = (I - torch::eye(D, torch::kFloat64)).abs().max().item<double>();
    EXPECT_LT(err, 1e-5) << "column block " << blk;
  }
  // The two column blocks are independent (not equal).
  EXPECT_GT((t.narrow(2, 0, D) - t.narrow(2, D, D)).abs().max().item<float>(), 0.1f);
  // libucm's QR against LAPACK's (torch::linalg_qr, the generator before ucm 0.9.0) for the
  // same normals: equal within the 1e-6 that create_namespace accepts (store_v1.md §7.3).
  const auto ref = lapack_projection(uint32_t(c.num_hidden_layers), uint32_t(c.num_key_value_heads),
                                     uint32_t(c.head_dim), 128, PrecomputeOptions{}.fingerprint.projection_seed);
  ASSERT_EQ(ref.size(), P.size());
  double worst = 0;
  size_t differ = 0;
  for (size_t i = 0; i < P.size(); ++i) {
    worst = std::max(worst, std::fabs(double(P[i]) - double(ref[i])));
    differ += P[i] != ref[i];
  }
  std::printf("r4_projection vs LAPACK: %zu of %zu floats differ, max |diff| %.3g\n", differ, P.size(), worst);
  EXPECT_LE(worst, 1e-6);
  // Different seed, different matrix.
  auto P2 = ucm::r4_projection(1, 1, uint32_t(D), 64, 7);
  auto P3 = ucm::r4_projection(1, 1, uint32_t(D), 64, 8);
  EXPECT_NE(P2, P3);
}

TEST_F(PrecomputeTest, ResumeWritesNothingNew) {
  PrecomputeOptions o = base_options(root_ / "storeA");
  o.resume = true;
  PrecomputeSummary sum;
  ASSERT_TRUE(run_precompute(o, Resources{model_, tok_}, &sum).ok());
  EXPECT_EQ(sum.documents, 0u);
  EXPECT_EQ(sum.skipped["resumed"], kDocNames.size());
  EXPECT_EQ(sum.blocks_written, 0u);
  EXPECT_EQ(sum.tokens, 0u);
}

TEST_F(PrecomputeTest, ShardsMergedEqualSingleRun) {
  std::set<std::string> single_docs;
  std::map<std::string, std::pair<std::string, uint32_t>> single;
  {
    auto s = open_ro(root_ / "storeA");
    NamespaceId ns = ns_of(s.get());
    for (const auto& d : s->documents(ns)) single[d.id] = {to_hex(d.last_block), d.blocks};
  }
  std::map<std::string, std::pair<std::string, uint32_t>> merged;
  for (uint32_t i = 0; i < 2; ++i) {
    PrecomputeOptions o = base_options(root_ / ("shard" + std::to_string(i)));
    o.shard_index = i;
    o.shard_count = 2;
    PrecomputeSummary sum;
    ASSERT_TRUE(run_precompute(o, Resources{model_, tok_}, &sum).ok());
    EXPECT_GT(sum.documents, 0u);
    // Merge shard i into a fresh store with `ucm migrate` (library call).
    admin::MigrateOptions mo;
    admin::MigrateReport mr;
    Status st = admin::migrate((root_ / ("shard" + std::to_string(i))).string(), (root_ / "merged").string(), mo, &mr);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  auto s = open_ro(root_ / "merged");
  NamespaceId ns = ns_of(s.get());
  auto sa = open_ro(root_ / "storeA");
  EXPECT_EQ(ns, ns_of(sa.get()));
  for (const auto& d : s->documents(ns)) merged[d.id] = {to_hex(d.last_block), d.blocks};
  EXPECT_EQ(merged, single);
  // Every block of the single run is in the merged store, with identical payload bytes.
  NamespaceDesc desc;
  NamespaceId id;
  ASSERT_TRUE(sa->find_namespace(to_hex(ns), &desc, &id).ok());
  for (const auto& n : kDocNames) {
    auto ids = stored_ids(n);
    std::vector<BlockHash> h;
    hash_blocks(root_hash(ns), reinterpret_cast<const uint32_t*>(ids.data()), ids.size(), 16, &h);
    std::string a(desc.payload_bytes(), '\0'), b(desc.payload_bytes(), '\0');
    LoadDest da, db;
    da.ptrs = {a.data()};
    db.ptrs = {b.data()};
    ASSERT_TRUE(sa->load(ns, &h.back(), 1, da)->wait().ok());
    ASSERT_TRUE(s->load(ns, &h.back(), 1, db)->wait().ok());
    // Two precompute runs are two forward passes: equal up to fp32 rounding, so each bf16 value
    // is the same or one step away (TwoForwardPassesDifferOnlyByRounding).
    size_t differ = 0;
    for (size_t i = 0; i < a.size() / 2; ++i) {
      const float x = bf16f(a, i), y = bf16f(b, i);
      ASSERT_LE(std::fabs(x - y), std::max(std::fabs(x), std::fabs(y)) * (1.0f / 128) + 1e-6f)
          << n << ": element " << i;
      differ += x != y;
    }
    EXPECT_LE(differ * 100, a.size() / 2) << n << ": " << differ << " elements differ";
  }
}

TEST_F(PrecomputeTest, NamespaceMismatchIsAClearErrorAndLosesNothing) {
  PrecomputeOptions o = base_options(root_ / "storeA");
  o.fingerprint.dtype = "fp16";
  PrecomputeSummary sum;
  Status st = run_precompute(o, Resources{model_, tok_}, &sum);
  ASSERT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("different namespace fingerprint"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("dtype bf16 (store) vs fp16 (this model)"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--namespace-name"), std::string::npos) << st.message();
  auto s = open_ro(root_ / "storeA");
  ASSERT_EQ(s->namespaces().size(), 1u);
  EXPECT_EQ(s->documents(ns_of(s.get())).size(), kDocNames.size());
}

TEST_F(PrecomputeTest, BadInputs) {
  // Wrong model dir.
  {
    PrecomputeOptions o = base_options(root_ / "bad1");
    o.model_dir = (root_ / "no-such-model").string();
    PrecomputeSummary sum;
    Status st = run_precompute(o, Resources{}, &sum);
    EXPECT_EQ(st.code(), Code::kInvalidArgument);
    EXPECT_NE(st.message().find("cannot load model"), std::string::npos) << st.message();
  }
  // JSONL corpus with malformed lines, an empty doc, a short doc and invalid UTF-8.
  fs::path jl = root_ / "bad.jsonl";
  {
    std::ofstream f(jl, std::ios::binary);
    f << R"({"id": "a", "text": )" << nlohmann::json(read_file(corpus_ / "windows.rst.txt")).dump() << "}\n";
    f << "{not json\n";
    f << R"({"id": "empty", "text": ""})" << "\n";
    f << R"({"id": "short", "text": "hi"})" << "\n";
    f << "{\"id\": \"bad-utf8\", \"text\": \"caf\xc3(\"}\n";
  }
  PrecomputeOptions o = base_options(root_ / "bad2");
  o.corpus = jl.string();
  o.template_file.clear();
  PrecomputeSummary sum;
  Status st = run_precompute(o, Resources{model_, tok_}, &sum);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(sum.documents, 1u);
  EXPECT_EQ(sum.skipped["malformed"] + sum.skipped["invalid_utf8"], 2u);
  EXPECT_EQ(sum.skipped["empty"], 1u);
  EXPECT_EQ(sum.skipped["short"], 1u);
  o.strict = true;
  o.store = (root_ / "bad3").string();
  st = run_precompute(o, Resources{model_, tok_}, &sum);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find(":2"), std::string::npos) << st.message();  // names the line
}

}  // namespace

// ---- synthetic checks (no model)

TEST(PrecomputeRepr, LayoutMatchesSpecSizes) {
  ReprSpec s{30, 3, 64, 16, 128, DType::kBF16};
  uint64_t total = 0;
  auto secs = repr_layout(s, &total);
  EXPECT_EQ(total, 57728u);  // store_v1.md §4.3
  EXPECT_EQ(secs[0].length, 11520u);
  EXPECT_EQ(secs[1].length, 23040u);
  EXPECT_EQ(secs[2].length, 23040u);
  for (auto& x : secs) EXPECT_EQ(x.offset % 64, 0u);
}

TEST(PrecomputeRepr, OutwardRoundingBrackets) {
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0, 3);
  for (int i = 0; i < 100000; ++i) {
    float x = g(rng) * (i % 7 == 0 ? 1e-30f : 1.0f);
    EXPECT_LE(bf16_to_float(bf16_round_down(x)), x);
    EXPECT_GE(bf16_to_float(bf16_round_up(x)), x);
    EXPECT_LE(fp16_to_float(fp16_round_down(x)), x);
    EXPECT_GE(fp16_to_float(fp16_round_up(x)), x);
    EXPECT_EQ(bf16_round_nearest(x), to_bf16_torch(x));
    if (i % 10 == 0) {
      EXPECT_EQ(fp16_round_nearest(x), to_f16_torch(x)) << x;  // libucm's converter = torch's
    }
  }
  EXPECT_EQ(bf16_to_float(bf16_round_down(1.0f)), 1.0f);
  EXPECT_EQ(fp16_to_float(fp16_round_up(1e6f)), INFINITY);
  EXPECT_EQ(fp16_to_float(fp16_round_down(1e6f)), 65504.0f);
}

TEST(PrecomputeRepr, EncoderMatchesLoops) {
  const uint32_t L = 2, H = 2, D = 8, T = 4, B = 16;
  std::mt19937 rng(3);
  std::normal_distribution<float> g;
  std::vector<float> k(L * T * H * D);
  for (auto& x : k) x = g(rng);
  auto P = ucm::r4_projection(L, H, D, B, 5);
  std::vector<const float*> kp = {k.data(), k.data() + T * H * D};
  std::string out;
  encode_block_repr(ReprSpec{L, H, D, T, B, DType::kFP32}, kp.data(), H * D, nullptr, 0, P.data(), &out);
  Repr r;
  ASSERT_TRUE(decode_repr(out, &r));
  for (uint32_t l = 0; l < L; ++l)
    for (uint32_t h = 0; h < H; ++h)
      for (uint32_t d = 0; d < D; ++d) {
        double s = 0;
        float mn = INFINITY, mx = -INFINITY;
        for (uint32_t t = 0; t < T; ++t) {
          float v = k[((l * T + t) * H + h) * D + d];
          s += v;
          mn = std::min(mn, v);
          mx = std::max(mx, v);
        }
        float got;
        std::memcpy(&got, r.sections[0].second.data() + 4 * ((l * H + h) * D + d), 4);
        EXPECT_EQ(got, float(s / T));
        std::memcpy(&got, r.sections[1].second.data() + 4 * (((l * 2) * H + h) * D + d), 4);
        EXPECT_EQ(got, mn);
        std::memcpy(&got, r.sections[1].second.data() + 4 * (((l * 2 + 1) * H + h) * D + d), 4);
        EXPECT_EQ(got, mx);
      }
}

// The payload encoder (what precompute runs): keys in the payload dtype, R4's dots in fp32. R0 and
// R1 equal the fp32 encoder's for the widened keys byte for byte; an R4 bit differs from the
// double-precision dots only where |dot| is within fp32 rounding of 0. Shapes: SmolLM2's (D 64,
// B 128, T 16), and odd ones (T 5: a tile tail; B 24: a half vector; D 40).
TEST(PrecomputeRepr, PayloadEncoderMatchesTheFp32Encoder) {
  struct Shape {
    uint32_t L, H, D, T, B;
  };
  for (const Shape sh : {Shape{3, 3, 64, 16, 128}, Shape{2, 2, 40, 5, 24}}) {
    const uint32_t L = sh.L, H = sh.H, D = sh.D, T = sh.T, B = sh.B;
    std::mt19937 rng(11);
    std::normal_distribution<float> g;
    auto P = ucm::r4_projection(L, H, D, B, 7);
    const size_t n = size_t{L} * T * H * D;
    std::vector<float> k32(n);
    for (auto& x : k32) x = g(rng) * 3;
    for (DType kd : {DType::kBF16, DType::kFP16, DType::kFP32}) {
      // The keys as a payload of dtype kd holds them, and the same values widened.
      std::vector<uint16_t> k16(n);
      std::vector<float> wide(n);
      for (size_t i = 0; i < n; ++i) {
        if (kd == DType::kBF16) k16[i] = bf16_round_nearest(k32[i]), wide[i] = bf16_to_float(k16[i]);
        else if (kd == DType::kFP16) k16[i] = fp16_round_nearest(k32[i]), wide[i] = fp16_to_float(k16[i]);
        else wide[i] = k32[i];
      }
      std::vector<const void*> kp(L);
      std::vector<const float*> wp(L);
      for (uint32_t l = 0; l < L; ++l) {
        const size_t at = size_t{l} * T * H * D;
        kp[l] = kd == DType::kFP32 ? static_cast<const void*>(k32.data() + at) : static_cast<const void*>(k16.data() + at);
        wp[l] = wide.data() + at;
      }
      const ReprSpec spec{L, H, D, T, B, DType::kBF16};
      std::string got, want;
      ucm::repr::encode_block_repr_payload(spec, kp.data(), kd, H * D, P.data(), &got);
      encode_block_repr(spec, wp.data(), H * D, nullptr, 0, P.data(), &want);
      ASSERT_EQ(got.size(), want.size());
      Repr rg, rw;
      ASSERT_TRUE(decode_repr(got, &rg));
      ASSERT_TRUE(decode_repr(want, &rw));
      EXPECT_EQ(rg.sections[0].second, rw.sections[0].second) << "R0";
      EXPECT_EQ(rg.sections[1].second, rw.sections[1].second) << "R1";
      const std::string& bg = rg.sections[4].second;
      const std::string& bw = rw.sections[4].second;
      ASSERT_EQ(bg.size(), bw.size());
      size_t differ = 0;
      for (uint32_t l = 0; l < L; ++l)
        for (uint32_t h = 0; h < H; ++h)
          for (uint32_t t = 0; t < T; ++t)
            for (uint32_t j = 0; j < B; ++j) {
              const size_t byte = ((size_t{l} * H + h) * T + t) * (B / 8) + j / 8;
              if (((bg[byte] >> (j % 8)) & 1) == ((bw[byte] >> (j % 8)) & 1)) continue;
              ++differ;
              double dot = 0, norm = 0;
              for (uint32_t d = 0; d < D; ++d) {
                const double x = wide[((size_t{l} * T + t) * H + h) * D + d];
                dot += x * P[((size_t{l} * H + h) * D + d) * B + j];
                norm += x * x;
              }
              EXPECT_LT(std::fabs(dot), 1e-5 * std::sqrt(norm)) << "R4 l" << l << " h" << h << " t" << t << " j" << j;
            }
      EXPECT_LE(differ, size_t{2}) << "R4 bits that differ, key dtype " << int(kd);
    }
  }
  const void* none[1] = {nullptr};
  std::string out;
  EXPECT_THROW(ucm::repr::encode_block_repr_payload(ReprSpec{1, 1, 8, 4, 16, DType::kBF16}, none, DType::kBF16, 8,
                                                    nullptr, &out),
               std::invalid_argument);
}

TEST(PrecomputeOptions, ParseShardLayersConfig) {
  uint32_t i = 9, n = 9;
  EXPECT_TRUE(parse_shard("1/4", &i, &n).ok());
  EXPECT_EQ(i, 1u);
  EXPECT_EQ(n, 4u);
  EXPECT_FALSE(parse_shard("4/4", &i, &n).ok());
  EXPECT_FALSE(parse_shard("x", &i, &n).ok());
  std::vector<uint32_t> v;
  EXPECT_TRUE(parse_layers("1,0,1", &v).ok());
  EXPECT_EQ(v, (std::vector<uint32_t>{0, 1}));
  EXPECT_FALSE(parse_layers("a", &v).ok());
  PrecomputeOptions o;
  EXPECT_TRUE(load_config(std::string(UCM_SOURCE_DIR) + "/configs/precompute.yaml", &o).ok());
  EXPECT_EQ(o.fingerprint.block_size, 16u);
  fs::path bad = fs::temp_directory_path() / ("ucm-bad-config-" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(bad) << "block_sise: 16\n";
  Status st = load_config(bad.string(), &o);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("block_sise"), std::string::npos);
  // The fingerprint keys are read by model::read_fingerprint_config, the reader the engine uses.
  std::ofstream(bad) << "dtype: fp16\ndense_layers: \"3,1,3\"\nblock_size: 32\nprojection_seed: 7\n";
  PrecomputeOptions f;
  ASSERT_TRUE(load_config(bad.string(), &f).ok());
  EXPECT_EQ(f.fingerprint.dtype, "fp16");
  EXPECT_EQ(f.fingerprint.dense_layers, (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(f.fingerprint.block_size, 32u);
  EXPECT_EQ(f.fingerprint.projection_seed, 7u);
  std::ofstream(bad) << "dtype: int8\n";
  st = load_config(bad.string(), &f);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("dtype"), std::string::npos) << st.message();
  fs::remove(bad);
}
