// The retriever's defaults, its YAML file (configs/retrieval.yaml) and its errors, through the C
// ABI (libucm.so).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "reference.h"
#include "ucm/retrieval.h"

#ifndef UCM_SOURCE_DIR
#error "UCM_SOURCE_DIR must name the source tree (configs/retrieval.yaml)"
#endif

using reftest::Request;
namespace fs = std::filesystem;

namespace {

std::string write_tmp(const std::string& text) {
  static int n = 0;
  const std::string p = (fs::temp_directory_path() / ("ucm_retr_" + std::to_string(::getpid()) + "_" +
                                                      std::to_string(n++) + ".yaml")).string();
  std::ofstream(p) << text;
  return p;
}

// A filled request (seed 2, the reference's default shape), its info, and the default params.
struct Filled {
  std::mt19937_64 rng{2};
  Request R;
  ucm_repr_info info{};
  ucm_retriever_params p = ucm_retriever_default_params();
  Filled() {
    R.fill(rng);
    info = R.info();
  }
};

TEST(RetrievalErrors, DefaultsAreTheDocumentedOnes) {
  const ucm_retriever_params p = ucm_retriever_default_params();
  EXPECT_EQ(p.struct_size, sizeof(ucm_retriever_params));
  EXPECT_EQ(p.policy, UCM_POLICY_QUEST);
  EXPECT_EQ(p.sink_blocks, 1u);
  EXPECT_EQ(p.local_blocks, 2u);
  EXPECT_FLOAT_EQ(p.sparse_ratio, 0.3f);
  EXPECT_EQ(p.min_blocks, 4u);
  EXPECT_EQ(p.top_k, 0u);
  EXPECT_FLOAT_EQ(p.psa_tau, 0.95f);
  EXPECT_EQ(p.psa_max_blocks, 0u);
  EXPECT_EQ(p.reuse_steps, 1u);
  EXPECT_EQ(p.shared_heads, 1);
  EXPECT_EQ(p.honor_dense_layers, 1);
}

TEST(RetrievalErrors, ConfigFileHoldsEveryDefault) {
  ucm_retriever_params p{};
  p.struct_size = sizeof p;  // an out-struct: the caller says its size
  ASSERT_EQ(ucm_retriever_params_load(UCM_SOURCE_DIR "/configs/retrieval.yaml", &p), UCM_OK) << ucm_last_error();
  const ucm_retriever_params d = ucm_retriever_default_params();
  EXPECT_EQ(std::memcmp(&p, &d, sizeof(p)), 0) << "configs/retrieval.yaml differs from the defaults";
  // Every field is a key of the file (so the file documents them all).
  std::ifstream f(UCM_SOURCE_DIR "/configs/retrieval.yaml");
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (const char* k : {"policy:", "sink_blocks:", "local_blocks:", "sparse_ratio:", "min_blocks:", "top_k:",
                        "psa_tau:", "psa_max_blocks:", "reuse_steps:", "shared_heads:", "honor_dense_layers:"})
    EXPECT_NE(text.find(std::string("\n") + k), std::string::npos) << k;
}

TEST(RetrievalErrors, ParamsLoadReadsValuesAndRejectsBadOnes) {
  ucm_retriever_params p{};
  p.struct_size = sizeof p;
  const std::string good = write_tmp("policy: GSA\nsink_blocks: 4\nsparse_ratio: 0.125\nshared_heads: false\n"
                                     "honor_dense_layers: 0\nreuse_steps: 8\n");
  ASSERT_EQ(ucm_retriever_params_load(good.c_str(), &p), UCM_OK) << ucm_last_error();
  EXPECT_EQ(p.policy, UCM_POLICY_GSA);
  EXPECT_EQ(p.sink_blocks, 4u);
  EXPECT_EQ(p.sparse_ratio, 0.125f);
  EXPECT_EQ(p.shared_heads, 0);
  EXPECT_EQ(p.honor_dense_layers, 0);
  EXPECT_EQ(p.reuse_steps, 8u);
  EXPECT_EQ(p.local_blocks, 2u);  // untouched keys keep the defaults
  struct Bad {
    const char* text;
    const char* word;  // the message names it
  } bads[] = {{"polcy: esa\n", "polcy"},        {"policy: nope\n", "policy"},     {"sparse_ratio: 1.5\n", "sparse_ratio"},
              {"psa_tau: 0\n", "psa_tau"},      {"reuse_steps: 0\n", "reuse_steps"}, {"top_k: -3\n", "top_k"},
              {"shared_heads: 2\n", "shared_heads"}, {"min_blocks: [1, 2]\n", "min_blocks"}, {"- a\n- b\n", "mapping"}};
  for (const auto& b : bads) {
    const std::string f = write_tmp(b.text);
    EXPECT_EQ(ucm_retriever_params_load(f.c_str(), &p), UCM_E_INVALID) << b.text;
    EXPECT_NE(std::string(ucm_last_error()).find(b.word), std::string::npos) << ucm_last_error();
    fs::remove(f);
  }
  EXPECT_EQ(ucm_retriever_params_load("/nonexistent/retrieval.yaml", &p), UCM_E_IO);
  EXPECT_EQ(ucm_retriever_params_load(nullptr, &p), UCM_E_INVALID);
  fs::remove(good);
}

TEST(RetrievalErrors, CreateRejectsBadParamsAndInfo) {
  Filled setup;
  auto& [rng, R, info, p] = setup;
  ucm_retriever_t* r = reinterpret_cast<ucm_retriever_t*>(0x1);
  EXPECT_EQ(ucm_retriever_create(nullptr, &info, nullptr, &r), UCM_E_INVALID);
  EXPECT_EQ(r, nullptr);  // *out is cleared on failure
  auto expect_bad = [&](ucm_retriever_params pp, ucm_repr_info ii, const float* proj, const char* word) {
    ucm_retriever_t* x = nullptr;
    EXPECT_EQ(ucm_retriever_create(&pp, &ii, proj, &x), UCM_E_INVALID) << word;
    EXPECT_NE(std::string(ucm_last_error()).find(word), std::string::npos) << ucm_last_error();
    EXPECT_EQ(x, nullptr);
  };
  // Each case spoils a copy of the good params and info; the error names `word`.
  using P = ucm_retriever_params;
  using I = ucm_repr_info;
  const struct {
    void (*spoil)(P&, I&);
    bool with_proj;
    const char* word;
  } cases[] = {
      {[](P& q, I&) { q.struct_size = 8; }, false, "struct_size"},
      {[](P& q, I&) { q.policy = 9; }, false, "policy"},
      {[](P& q, I&) { q.sparse_ratio = -0.1f; }, false, "sparse_ratio"},
      {[](P& q, I&) { q.reuse_steps = 0; }, false, "reuse_steps"},
      {[](P&, I& j) { j.struct_size = 4; }, false, "struct_size"},
      {[](P&, I& j) { j.head_dim = 0; }, false, "head_dim"},
      {[](P& q, I&) { q.policy = UCM_POLICY_GSA; }, false, "projection"},
      {[](P& q, I& j) {
         q.policy = UCM_POLICY_GSA;
         j.sections = UCM_REPR_R0 | UCM_REPR_R1;
         j.hash_bits = 0;
       },
       true, "R4"},
  };
  for (const auto& c : cases) {
    P q = p;
    I j = info;
    c.spoil(q, j);
    expect_bad(q, j, c.with_proj ? R.proj.data() : nullptr, c.word);
  }
}

TEST(RetrievalErrors, SelectRejectsBadQueriesAndWritesNothing) {
  Filled setup;
  auto& [rng, R, info, p] = setup;
  p.shared_heads = 0;
  ucm_retriever_t* r = nullptr;
  ASSERT_EQ(ucm_retriever_create(&p, &info, nullptr, &r), UCM_OK) << ucm_last_error();
  ucm_repr_buffers bufs = R.buffers();
  std::vector<float> q = R.queries(rng);
  const ucm_retrieval_query good{sizeof(good), 0, q.data(), UCM_DTYPE_F32, 9, 3, &bufs, 40, nullptr, 0};
  std::vector<uint32_t> idx(3 * 40, 7), counts(3, 7);
  ASSERT_EQ(ucm_retriever_select(r, &good, idx.data(), 40, counts.data(), nullptr), UCM_OK) << ucm_last_error();
  auto expect_bad = [&](ucm_retrieval_query qq, size_t cap, const char* word) {
    std::vector<uint32_t> i2(3 * 40, 7), c2(3, 7);
    EXPECT_EQ(ucm_retriever_select(r, &qq, i2.data(), cap, c2.data(), nullptr), UCM_E_INVALID) << word;
    EXPECT_NE(std::string(ucm_last_error()).find(word), std::string::npos) << ucm_last_error();
    EXPECT_EQ(i2, std::vector<uint32_t>(3 * 40, 7)) << word;
    EXPECT_EQ(c2, std::vector<uint32_t>(3, 7)) << word;
  };
  ucm_retrieval_query qq = good;
  qq.layer = 3;
  expect_bad(qq, 40, "layer");
  qq = good;
  qq.n_q_heads = 8;
  expect_bad(qq, 40, "n_q_heads");
  qq = good;
  qq.q_dtype = UCM_DTYPE_F16;
  expect_bad(qq, 40, "q_dtype");
  qq = good;
  qq.n_blocks = 41;
  expect_bad(qq, 41, "capacity");
  qq = good;
  qq.struct_size = 4;
  expect_bad(qq, 40, "struct_size");
  expect_bad(good, 5, "cap");  // the sets hold 12 blocks
  ucm_repr_buffers no_r1 = bufs;
  no_r1.r1 = nullptr;
  qq = good;
  qq.reprs = &no_r1;
  expect_bad(qq, 40, "r1");
  ucm_repr_buffers range = bufs;
  range.head_begin = 2;
  range.head_end = 5;
  qq = good;
  qq.reprs = &range;
  expect_bad(qq, 40, "head range");
  EXPECT_EQ(ucm_retriever_select(nullptr, &good, idx.data(), 40, counts.data(), nullptr), UCM_E_INVALID);
  EXPECT_EQ(ucm_retriever_select(r, &good, nullptr, 40, counts.data(), nullptr), UCM_E_INVALID);
  ucm_retriever_free(r);
  ucm_retriever_free(nullptr);
  ucm_retriever_reset(nullptr);
}

}  // namespace
