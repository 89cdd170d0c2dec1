// The namespace rule and namespace creation of store_v1.md §7.3 through libucm.so
// (ucm_store_namespace_match, ucm_store_namespace_create; the C++ API for a planted projection): which namespace suits a model, the
// refusal naming both fingerprints, the pick among several, and the r4_projection a created
// namespace gets (its numbers against LAPACK: tests/precompute ProjectionIsOrthogonal...).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "store_blocks.h"
#include "ucm/namespace_match.h"
#include "ucm/store.h"
#include "ucm/ucm.h"

namespace fs = std::filesystem;

namespace {

// A descriptor of model "m" (digest "ab", fp16, 2 layers, 2 KV heads, head dim 8) with changes.
std::string desc(const std::string& changes = "", const std::string& extra = R"({"hash_bits":16,"projection_seed":7})") {
  std::string d = R"({"model_id":"m","weights_digest":"ab","dtype":"fp16","block_size":16,"num_layers":2,)"
                  R"("num_kv_heads":2,"head_dim":8,"extra":)" + extra;
  return d + (changes.empty() ? "" : "," + changes) + "}";
}

class NamespaceMatch : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (fs::temp_directory_path() / ("ucm_nsmatch_" + std::to_string(::getpid()) + "_" +
                                          ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    fs::remove_all(path_);
    ucm_store_open_params p = ucm_store_default_open_params();
    p.mode = UCM_OPEN_CREATE;
    p.refresh_interval_ms = 0;
    ASSERT_EQ(ucm_store_open(path_.c_str(), &p, &s_), UCM_OK) << ucm_last_error();
  }
  void TearDown() override {
    ucm_store_close(s_);
    fs::remove_all(path_);
  }
  std::vector<uint8_t> add(const std::string& d) {
    std::vector<uint8_t> id(16);
    EXPECT_EQ(ucm_store_namespace_register(s_, d.c_str(), id.data()), UCM_OK) << ucm_last_error();
    return id;
  }
  // (rc, id, exact) of matching `d` with engine block `e`.
  int match(const std::string& d, uint32_t e, std::vector<uint8_t>* id, int* exact = nullptr) {
    id->assign(16, 0);
    return ucm_store_namespace_match(s_, d.c_str(), e, nullptr, id->data(), exact);
  }
  std::string path_;
  ucm_store_t* s_ = nullptr;
};

TEST_F(NamespaceMatch, EmptyStoreRefusesNamingTheFingerprint) {
  std::vector<uint8_t> id;
  ASSERT_EQ(match(desc(), 0, &id), UCM_E_NOT_FOUND);
  const std::string msg = ucm_last_error();
  EXPECT_NE(msg.find("weights_digest ab"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Store namespaces: none"), std::string::npos) << msg;
}

TEST_F(NamespaceMatch, ExactIdIsPickedFirstAndFlagged) {
  const auto other_extra = add(desc("", R"({"hash_bits":32})"));  // suits too: extra is not in the rule
  const auto own = add(desc());
  std::vector<uint8_t> id;
  int exact = -1;
  ASSERT_EQ(match(desc(), 0, &id, &exact), UCM_OK) << ucm_last_error();
  EXPECT_EQ(id, own);
  EXPECT_EQ(exact, 1);
  ASSERT_EQ(match(desc("", R"({"hash_bits":64})"), 0, &id, &exact), UCM_OK);
  EXPECT_EQ(exact, 0);
  EXPECT_TRUE(id == own || id == other_extra);
}

TEST_F(NamespaceMatch, EachFingerprintFieldRefusesAndIsNamed) {
  add(desc());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("weights_digest":"cd")", "weights_digest ab (store) vs cd"},
      {R"("dtype":"bf16")", "dtype fp16 (store) vs bf16"},
      {R"("num_layers":3)", "num_layers 2 (store) vs 3"},
      {R"("num_kv_heads":1)", "num_kv_heads 2 (store) vs 1"},
      {R"("head_dim":16)", "head_dim 8 (store) vs 16"},
      {R"("block_size":32)", "block_size 16 (store) vs 32"}};
  for (const auto& [change, named] : cases) {
    std::string d = desc();  // the field changed in place
    const std::string key = change.substr(0, change.find(':') + 1);
    const size_t at = d.find(key);
    ASSERT_NE(at, std::string::npos) << key;
    d.replace(at, d.find(',', at) - at, change);
    std::vector<uint8_t> id;
    EXPECT_EQ(match(d, 0, &id), UCM_E_NOT_FOUND) << change;
    const std::string msg = ucm_last_error();
    EXPECT_NE(msg.find(named), std::string::npos) << change << ": " << msg;
  }
}

TEST_F(NamespaceMatch, EngineBlockNeedsADivisorAndPrefersTheLargest) {
  std::string d8 = desc(), d16 = desc(), d48 = desc();
  d8.replace(d8.find(R"("block_size":16)"), 15, R"("block_size":8)");
  d48.replace(d48.find(R"("block_size":16)"), 15, R"("block_size":48)");
  const auto id8 = add(d8), id16 = add(d16);
  add(d48);
  std::vector<uint8_t> id;
  ASSERT_EQ(match(d8, 32, &id), UCM_OK);  // d8's own id is there: exact first
  EXPECT_EQ(id, id8);
  std::string d4 = desc();
  d4.replace(d4.find(R"("block_size":16)"), 15, R"("block_size":4)");
  ASSERT_EQ(match(d4, 32, &id), UCM_OK);  // 8 and 16 divide 32, 48 does not: the largest
  EXPECT_EQ(id, id16);
  ASSERT_EQ(match(d4, 24, &id), UCM_OK);  // only 8 divides 24
  EXPECT_EQ(id, id8);
  ASSERT_EQ(match(d4, 20, &id), UCM_E_NOT_FOUND);
  EXPECT_NE(std::string(ucm_last_error()).find("does not divide the engine's 20"), std::string::npos);
}

TEST_F(NamespaceMatch, ANamedNamespaceIsCheckedAlone) {
  std::string d8 = desc(R"("name":"eight")");
  d8.replace(d8.find(R"("block_size":16)"), 15, R"("block_size":8)");
  const auto id8 = add(d8);
  add(desc(R"("name":"sixteen")"));
  std::vector<uint8_t> id(16);
  ASSERT_EQ(ucm_store_namespace_match(s_, desc().c_str(), 16, "eight", id.data(), nullptr), UCM_OK) << ucm_last_error();
  EXPECT_EQ(id, id8);  // not the exact "sixteen": the name decides
  std::string bf = desc();
  bf.replace(bf.find(R"("dtype":"fp16")"), 14, R"("dtype":"bf16")");
  EXPECT_EQ(ucm_store_namespace_match(s_, bf.c_str(), 16, "eight", id.data(), nullptr), UCM_E_NOT_FOUND);
  EXPECT_NE(std::string(ucm_last_error()).find("dtype fp16 (store) vs bf16"), std::string::npos) << ucm_last_error();
  EXPECT_EQ(ucm_store_namespace_match(s_, desc().c_str(), 16, "nine", id.data(), nullptr), UCM_E_NOT_FOUND);
}

TEST_F(NamespaceMatch, AdapterNamespacesNeverSuit) {
  add(desc("", R"({"lora":{"name":"a","digest":"00"}})"));
  std::vector<uint8_t> id;
  ASSERT_EQ(match(desc(), 16, &id), UCM_E_NOT_FOUND);
  EXPECT_NE(std::string(ucm_last_error()).find("LoRA"), std::string::npos);
}

TEST_F(NamespaceMatch, CreateRegistersWithItsProjectionAndIsIdempotent) {
  std::vector<uint8_t> id(16), again(16), found;
  ASSERT_EQ(ucm_store_namespace_create(s_, desc().c_str(), id.data()), UCM_OK) << ucm_last_error();
  ASSERT_EQ(ucm_store_namespace_create(s_, desc().c_str(), again.data()), UCM_OK) << ucm_last_error();
  EXPECT_EQ(id, again);
  int exact = 0;
  ASSERT_EQ(match(desc(), 0, &found, &exact), UCM_OK);
  EXPECT_EQ(found, id);
  EXPECT_EQ(exact, 1);
  // r4_projection: fp32 [L=2][H=2][D=8][B=16]; each (l, h) slice's two 8x8 blocks orthogonal.
  std::vector<float> P(2 * 2 * 8 * 16);
  size_t len = 0;
  ASSERT_EQ(ucm_store_attachment_get(s_, id.data(), "r4_projection", P.data(), P.size() * 4, &len), UCM_OK);
  ASSERT_EQ(len, P.size() * 4);
  for (size_t lh = 0; lh < 4; ++lh)
    for (size_t blk = 0; blk < 2; ++blk)
      for (size_t i = 0; i < 8; ++i)
        for (size_t j = 0; j < 8; ++j) {
          double dot = 0;
          for (size_t d = 0; d < 8; ++d)
            dot += double(P[(lh * 8 + d) * 16 + blk * 8 + i]) * P[(lh * 8 + d) * 16 + blk * 8 + j];
          EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-6) << lh << " " << blk << " " << i << " " << j;
        }
  // Without hash bits: no projection.
  std::vector<uint8_t> plain(16);
  ASSERT_EQ(ucm_store_namespace_create(s_, desc(R"("name":"plain")", "{}").c_str(), plain.data()), UCM_OK);
  EXPECT_EQ(ucm_store_attachment_get(s_, plain.data(), "r4_projection", nullptr, 0, &len), UCM_E_NOT_FOUND);
}

TEST_F(NamespaceMatch, CreateNeedsAWriter) {
  ucm_store_close(s_);
  ucm_store_open_params p = ucm_store_default_open_params();
  p.mode = UCM_OPEN_READ_ONLY;
  ASSERT_EQ(ucm_store_open(path_.c_str(), &p, &s_), UCM_OK);
  std::vector<uint8_t> id(16);
  EXPECT_EQ(ucm_store_namespace_create(s_, desc().c_str(), id.data()), UCM_E_INVALID);
  EXPECT_NE(std::string(ucm_last_error()).find("read-only"), std::string::npos) << ucm_last_error();
}

// A stored projection is checked, not replaced (store_v1.md §7.3): one that differs in the last
// bits stays (the blocks were encoded with it); one of another seed is refused.
TEST_F(NamespaceMatch, StoredProjectionIsCheckedNotReplaced) {
  ucm_store_close(s_);
  s_ = nullptr;
  auto s = ucm::test::open_test_store(path_, /*rw=*/true, /*create=*/false);
  ASSERT_TRUE(s);
  ucm::NamespaceDesc d;
  ASSERT_TRUE(ucm::NamespaceDesc::from_json(desc(), &d).ok());
  ucm::NamespaceId ns{};
  ASSERT_TRUE(s->register_namespace(d, &ns).ok());
  std::vector<float> near = ucm::r4_projection(2, 2, 8, 16, 7);
  near[5] = std::nextafter(near[5], 2.0f);
  ASSERT_TRUE(s->put_attachment(ns, "r4_projection", near.data(), near.size() * 4).ok());
  std::vector<float> got;
  ucm::NamespaceId id{};
  ASSERT_TRUE(ucm::create_namespace(s.get(), d, &id, &got).ok());
  EXPECT_EQ(id, ns);
  EXPECT_EQ(got, near);
  ucm::NamespaceDesc other = d;
  other.name = "other-seed";
  other.extra_json = R"({"hash_bits":16,"projection_seed":8})";
  ucm::NamespaceId ons{};
  ASSERT_TRUE(s->register_namespace(other, &ons).ok());
  ASSERT_TRUE(s->put_attachment(ons, "r4_projection", near.data(), near.size() * 4).ok());
  const ucm::Status st = ucm::create_namespace(s.get(), other, &id);
  EXPECT_EQ(st.code(), ucm::Code::kCorruption) << st.ToString();
}

TEST(NamespaceMatchArgs, NullAndBadDescriptorsAreInvalid) {
  uint8_t id[16];
  EXPECT_EQ(ucm_store_namespace_match(nullptr, "{}", 0, nullptr, id, nullptr), UCM_E_INVALID);
  EXPECT_EQ(ucm_store_namespace_create(nullptr, "{}", id), UCM_E_INVALID);
}

}  // namespace
