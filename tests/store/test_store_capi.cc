// The C ABI (ucm/ucm.h) through libucm.so only, one TEST per behaviour: version and codes, open
// params and errors, the writer lock, namespaces, hashing, dump + lookup, paged and contiguous
// loads with head ranges and per-block status, metrics, hash seeds, the log callback.
// tests/store/test_capi_c.c is the same ABI compiled as C.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "ucm/ucm.h"

namespace fs = std::filesystem;

namespace {
const char* kDesc =
    R"({"model_id":"capi-model","weights_digest":"ab","dtype":"fp16","block_size":4,"num_layers":2,)"
    R"("num_kv_heads":2,"head_dim":4,"name":"capi"})";
constexpr size_t L = 2, T = 4, H = 2, D = 4, S = 2, kPayload = L * 2 * T * H * D * S;  // 256 bytes

std::vector<uint8_t> payload(size_t i) {
  std::vector<uint8_t> v(kPayload);
  for (size_t j = 0; j < kPayload; ++j) v[j] = uint8_t(i * 37 + j * 7 + 1);
  return v;
}

int open_mode(const std::string& p, int mode, ucm_store_t** out) {
  ucm_store_open_params params = ucm_store_default_open_params();
  params.mode = mode;
  params.io_threads = 2;
  params.refresh_interval_ms = 0;
  return ucm_store_open(p.c_str(), &params, out);
}

// A store with namespace "capi" and 4 of the 5 full blocks of a 23-token sequence dumped.
class CApi : public ::testing::Test {
 protected:
  void SetUp() override {
    static int n = 0;
    path = (fs::temp_directory_path() / ("ucm_capi_" + std::to_string(::getpid()) + "_" + std::to_string(n++))).string();
    fs::remove_all(path);
    ASSERT_EQ(open_mode(path, UCM_OPEN_CREATE, &w), UCM_OK) << ucm_last_error();
    ASSERT_EQ(ucm_store_namespace_register(w, kDesc, ns), UCM_OK) << ucm_last_error();
    toks.resize(4 * 5 + 3);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = uint32_t(i * 13);
    hashes.resize(16 * 5);
    size_t nb = 0;
    ASSERT_EQ(ucm_hash_blocks(ns, nullptr, toks.data(), toks.size(), 4, hashes.data(), 5, &nb), UCM_OK);
    std::vector<const void*> kv;
    std::vector<uint8_t> parents(16 * 4);
    for (size_t i = 0; i < 4; ++i) {
      pl.push_back(payload(i));
      if (i) std::memcpy(&parents[16 * i], &hashes[16 * (i - 1)], 16);
    }
    for (auto& p : pl) kv.push_back(p.data());
    // parents[0]: the chain root, MD5("ucm.hash.v1" || ns) (store_v1.md §4.1), computed here
    // with OpenSSL, independently of the library.
    std::string root_in = "ucm.hash.v1" + std::string(reinterpret_cast<const char*>(ns), 16);
    unsigned int md_len = 0;
    ASSERT_EQ(EVP_Digest(root_in.data(), root_in.size(), parents.data(), &md_len, EVP_md5(), nullptr), 1);
    ASSERT_EQ(md_len, 16u);
    ucm_task_t* task = nullptr;
    ASSERT_EQ(ucm_store_dump(w, ns, hashes.data(), parents.data(), 4, kv.data(), &task), UCM_OK) << ucm_last_error();
    ASSERT_EQ(ucm_task_wait(task, -1), UCM_OK) << ucm_last_error();
    EXPECT_EQ(ucm_task_check(task), 1);
    EXPECT_EQ(ucm_task_block_status(task, 3), UCM_OK);
    ucm_task_free(task);
    ASSERT_EQ(open_mode(path, UCM_OPEN_READ_ONLY, &ro), UCM_OK) << ucm_last_error();
  }
  void TearDown() override {
    ucm_store_close(ro);
    ucm_store_close(w);
    fs::remove_all(path);
  }
  std::string path;
  ucm_store_t* w = nullptr;
  ucm_store_t* ro = nullptr;
  uint8_t ns[16] = {};
  std::vector<uint32_t> toks;
  std::vector<uint8_t> hashes;
  std::vector<std::vector<uint8_t>> pl;
};

}  // namespace

TEST(CApiBasics, VersionMacrosMatchTheLibrary) {
  const std::string want = std::to_string(UCM_VERSION_MAJOR) + "." + std::to_string(UCM_VERSION_MINOR) + "." +
                           std::to_string(UCM_VERSION_PATCH);
  EXPECT_EQ(want, UCM_VERSION_STRING);
  EXPECT_STREQ(ucm_version(), UCM_VERSION_STRING);
  EXPECT_EQ(ucm_format_version(), 5u);  // single stores (store_v1.md §10); sharded roots are 3
}

TEST(CApiBasics, CodeNamesAndMessages) {
  EXPECT_STREQ(ucm_code_name(UCM_E_CORRUPTION), "UCM_E_CORRUPTION");
  EXPECT_STREQ(ucm_code_name(UCM_OK), "UCM_OK");
  EXPECT_STREQ(ucm_code_name(12345), "UCM_E_UNKNOWN");
  EXPECT_NE(std::string(ucm_strerror(UCM_E_CORRUPTION)).find("checksum"), std::string::npos);
  EXPECT_NE(std::string(ucm_strerror(UCM_E_BUSY)).find("writer lock"), std::string::npos);
  EXPECT_STREQ(ucm_strerror(-7), "unknown return code");
  for (int c = UCM_OK; c <= UCM_E_INTERNAL; ++c) EXPECT_STRNE(ucm_strerror(c), "unknown return code") << c;
}

TEST(CApiBasics, DefaultOpenParams) {
  const ucm_store_open_params p = ucm_store_default_open_params();
  EXPECT_EQ(p.struct_size, sizeof(ucm_store_open_params));
  EXPECT_EQ(p.mode, UCM_OPEN_READ_ONLY);
  EXPECT_EQ(p.io_threads, 8u);
  EXPECT_EQ(p.direct_io, 1);
  EXPECT_EQ(p.refresh_interval_ms, 1000u);
  EXPECT_EQ(p.reader_dir, nullptr);
}

TEST(CApiBasics, OpenErrorsSayWhat) {
  const std::string p = (fs::temp_directory_path() / ("ucm_capi_missing_" + std::to_string(::getpid()))).string();
  fs::remove_all(p);
  ucm_store_t* st = reinterpret_cast<ucm_store_t*>(0x1);
  EXPECT_EQ(ucm_store_open(p.c_str(), nullptr, &st), UCM_E_INVALID);  // NULL params = read-only
  EXPECT_EQ(st, nullptr);
  EXPECT_NE(std::string(ucm_last_error()).find(p), std::string::npos) << ucm_last_error();
  EXPECT_EQ(ucm_store_open(nullptr, nullptr, &st), UCM_E_INVALID);
  ucm_store_open_params bad = ucm_store_default_open_params();
  bad.mode = 42;
  EXPECT_EQ(ucm_store_open(p.c_str(), &bad, &st), UCM_E_INVALID);
  EXPECT_NE(std::string(ucm_last_error()).find("unknown mode 42"), std::string::npos) << ucm_last_error();
  bad = ucm_store_default_open_params();
  bad.struct_size = 4;
  EXPECT_EQ(ucm_store_open(p.c_str(), &bad, &st), UCM_E_INVALID);
  EXPECT_NE(std::string(ucm_last_error()).find("struct_size"), std::string::npos) << ucm_last_error();
  EXPECT_FALSE(fs::exists(p));
}

TEST_F(CApi, SecondWriterIsBusyAndNamesTheHolder) {
  ucm_store_t* st2 = nullptr;
  EXPECT_EQ(open_mode(path, UCM_OPEN_READ_WRITE, &st2), UCM_E_BUSY);
  EXPECT_EQ(st2, nullptr);
  EXPECT_NE(std::string(ucm_last_error()).find("locked by pid " + std::to_string(::getpid())), std::string::npos);
}

TEST_F(CApi, NamespaceRegisterAndFind) {
  EXPECT_EQ(ucm_store_namespace_register(w, "{not json", ns), UCM_E_INVALID);
  uint8_t found[16];
  char desc[512];
  size_t dlen = 0;
  ASSERT_EQ(ucm_store_namespace_find(ro, "capi", found, desc, sizeof desc, &dlen), UCM_OK) << ucm_last_error();
  EXPECT_EQ(0, std::memcmp(found, ns, 16));
  EXPECT_EQ(std::strlen(desc), dlen);
  EXPECT_EQ(ucm_store_namespace_find(ro, "capi", found, desc, 4, &dlen), UCM_E_INVALID);
  EXPECT_EQ(ucm_store_namespace_find(ro, "nosuch", found, nullptr, 0, nullptr), UCM_E_NOT_FOUND);
}

TEST_F(CApi, HashBlocksChainsAndReportsTheSizeNeeded) {
  std::vector<uint8_t> out(16 * 5);
  size_t nb = 0;
  EXPECT_EQ(ucm_hash_blocks(ns, nullptr, toks.data(), toks.size(), 4, out.data(), 2, &nb), UCM_E_INVALID);
  EXPECT_EQ(nb, 5u);
  // Chaining from block 2's hash gives blocks 3..5.
  std::vector<uint8_t> tail(16 * 3);
  ASSERT_EQ(ucm_hash_blocks(ns, &hashes[16], toks.data() + 8, 12, 4, tail.data(), 3, &nb), UCM_OK);
  EXPECT_EQ(0, std::memcmp(tail.data(), &hashes[32], 48));
  EXPECT_EQ(ucm_hash_blocks(ns, nullptr, toks.data(), toks.size(), 0, out.data(), 5, &nb), UCM_E_INVALID);
}

TEST_F(CApi, LookupGivesThePrefix) {
  uint8_t present[5];
  size_t prefix = 0;
  ASSERT_EQ(ucm_store_lookup(ro, ns, hashes.data(), 5, present, &prefix), UCM_OK);
  EXPECT_EQ(prefix, 4u);
  EXPECT_EQ(present[3], 1);
  EXPECT_EQ(present[4], 0);
}

TEST_F(CApi, PagedLoadOfAHeadRange) {
  std::vector<std::vector<uint8_t>> pages(4 * L * 2, std::vector<uint8_t>(T * 1 * D * S, 0));
  std::vector<void*> ptrs;
  for (auto& v : pages) ptrs.push_back(v.data());
  ucm_task_t* task = nullptr;
  ASSERT_EQ(ucm_store_load(ro, ns, hashes.data(), 4, UCM_DEST_PAGED, ptrs.data(), 1, 2, &task), UCM_OK)
      << ucm_last_error();
  ASSERT_EQ(ucm_task_wait(task, 5000), UCM_OK) << ucm_last_error();
  ucm_task_free(task);
  for (size_t i = 0; i < 4; ++i)
    for (size_t l = 0; l < L; ++l)
      for (size_t k = 0; k < 2; ++k)
        for (size_t t = 0; t < T; ++t) {
          const uint8_t* want = pl[i].data() + ((((l * 2 + k) * T + t) * H + 1) * D) * S;
          const uint8_t* got = pages[(i * L + l) * 2 + k].data() + t * D * S;
          ASSERT_EQ(0, std::memcmp(want, got, D * S)) << i << " " << l << " " << k << " " << t;
        }
}

TEST_F(CApi, ContiguousLoadWithAMissHasPerBlockStatus) {
  std::vector<std::vector<uint8_t>> dst(2, std::vector<uint8_t>(kPayload, 0xEE));
  void* dptr[2] = {dst[0].data(), dst[1].data()};
  std::vector<uint8_t> two(32);
  std::memcpy(two.data(), &hashes[16 * 3], 16);
  std::memcpy(two.data() + 16, &hashes[16 * 4], 16);
  ucm_task_t* task = nullptr;
  ASSERT_EQ(ucm_store_load(ro, ns, two.data(), 2, UCM_DEST_CONTIGUOUS, dptr, 0, 0, &task), UCM_OK);
  EXPECT_EQ(ucm_task_wait(task, -1), UCM_E_NOT_FOUND);
  EXPECT_EQ(ucm_task_block_status(task, 0), UCM_OK);
  EXPECT_EQ(ucm_task_block_status(task, 1), UCM_E_NOT_FOUND);
  EXPECT_EQ(ucm_task_block_status(task, 2), UCM_E_INVALID);
  ucm_task_free(task);
  EXPECT_EQ(dst[0], pl[3]);
  EXPECT_EQ(dst[1], std::vector<uint8_t>(kPayload, 0xEE)) << "a missed block's destination was touched";
}

TEST_F(CApi, BadHeadRangeIsRefusedUpFront) {
  std::vector<uint8_t> dst(kPayload);
  void* dptr[1] = {dst.data()};
  ucm_task_t* task = reinterpret_cast<ucm_task_t*>(0x1);
  EXPECT_EQ(ucm_store_load(ro, ns, hashes.data(), 1, UCM_DEST_CONTIGUOUS, dptr, 1, 3, &task), UCM_E_INVALID);
  EXPECT_EQ(task, nullptr);
  EXPECT_NE(std::string(ucm_last_error()).find("KV-head range"), std::string::npos) << ucm_last_error();
  EXPECT_EQ(ucm_store_load(ro, ns, hashes.data(), 1, 7, dptr, 0, 0, &task), UCM_E_INVALID);
}

TEST_F(CApi, UnregisteredNamespaceIsNotFoundForDumpAndLoad) {
  uint8_t other[16] = {1, 2, 3};
  const void* kv[1] = {pl[0].data()};
  ucm_task_t* task = nullptr;
  EXPECT_EQ(ucm_store_dump(w, other, hashes.data(), hashes.data(), 1, kv, &task), UCM_E_NOT_FOUND);
  EXPECT_NE(std::string(ucm_last_error()).find("not registered"), std::string::npos) << ucm_last_error();
  EXPECT_EQ(task, nullptr);
  std::vector<uint8_t> dst(kPayload);
  void* dptr[1] = {dst.data()};
  EXPECT_EQ(ucm_store_load(ro, other, hashes.data(), 1, UCM_DEST_CONTIGUOUS, dptr, 0, 0, &task), UCM_E_NOT_FOUND);
  EXPECT_NE(std::string(ucm_last_error()).find("not registered"), std::string::npos) << ucm_last_error();
  EXPECT_EQ(task, nullptr);
}

TEST_F(CApi, MetricsCountLoadsAndErrors) {
  std::vector<uint8_t> dst(kPayload);
  void* dptr[1] = {dst.data()};
  ucm_task_t* task = nullptr;
  ASSERT_EQ(ucm_store_load(ro, ns, &hashes[16 * 4], 1, UCM_DEST_CONTIGUOUS, dptr, 0, 0, &task), UCM_OK);
  EXPECT_EQ(ucm_task_wait(task, -1), UCM_E_NOT_FOUND);
  ucm_task_free(task);
  ASSERT_EQ(ucm_store_load(ro, ns, &hashes[0], 1, UCM_DEST_CONTIGUOUS, dptr, 0, 0, &task), UCM_OK);
  EXPECT_EQ(ucm_task_wait(task, -1), UCM_OK);
  ucm_task_free(task);
  size_t mlen = 0;
  EXPECT_EQ(ucm_store_metrics(ro, nullptr, 0, &mlen), UCM_OK);  // a size query (ucm.h "Sized outputs")
  std::string m(mlen + 1, '\0');
  ASSERT_EQ(ucm_store_metrics(ro, m.data(), m.size(), &mlen), UCM_OK);
  EXPECT_NE(m.find("ucm_blocks_loaded_total 1"), std::string::npos) << m;
  EXPECT_NE(m.find("ucm_errors_total{code=\"NOT_FOUND\"} 1"), std::string::npos) << m;
  EXPECT_EQ(ucm_store_refresh(ro), UCM_OK);
}

// Hash seeds (store_v1.md §7.1): a native namespace seeds its chains with its own id; a converted
// one (extra.hash_seed_namespace) with its source's, so its hashes equal the source's.
TEST_F(CApi, HashSeedOfNativeAndConvertedNamespaces) {
  uint8_t seed[16];
  ASSERT_EQ(ucm_store_namespace_hash_seed(ro, ns, seed), UCM_OK) << ucm_last_error();
  EXPECT_EQ(0, std::memcmp(seed, ns, 16));
  static const char* hx = "0123456789abcdef";
  std::string ns_hex;
  for (uint8_t c : ns) ns_hex += std::string{hx[c >> 4], hx[c & 15]};
  const std::string conv =
      R"({"model_id":"capi-model","weights_digest":"ab","dtype":"bf16","block_size":4,"num_layers":2,)"
      R"("num_kv_heads":2,"head_dim":4,"name":"capi-bf16","extra":{"hash_seed_namespace":")" + ns_hex + R"("}})";
  uint8_t ns2[16];
  ASSERT_EQ(ucm_store_namespace_register(w, conv.c_str(), ns2), UCM_OK) << ucm_last_error();
  EXPECT_NE(0, std::memcmp(ns2, ns, 16));
  ASSERT_EQ(ucm_store_namespace_hash_seed(ro, ns2, seed), UCM_OK) << ucm_last_error();  // refreshes once
  EXPECT_EQ(0, std::memcmp(seed, ns, 16));
  std::vector<uint8_t> conv_hashes(16 * 5);
  size_t nb = 0;
  ASSERT_EQ(ucm_hash_blocks(seed, nullptr, toks.data(), toks.size(), 4, conv_hashes.data(), 5, &nb), UCM_OK);
  EXPECT_EQ(conv_hashes, hashes);
  uint8_t nobody[16] = {9};
  EXPECT_EQ(ucm_store_namespace_hash_seed(ro, nobody, seed), UCM_E_NOT_FOUND);
  EXPECT_EQ(ucm_store_namespace_hash_seed(ro, nullptr, seed), UCM_E_INVALID);
}

TEST_F(CApi, TaskFreeWaitsForARunningTask) {
  std::vector<std::vector<uint8_t>> dst(4, std::vector<uint8_t>(kPayload));
  std::vector<void*> dptr;
  for (auto& d : dst) dptr.push_back(d.data());
  ucm_task_t* task = nullptr;
  ASSERT_EQ(ucm_store_load(ro, ns, hashes.data(), 4, UCM_DEST_CONTIGUOUS, dptr.data(), 0, 0, &task), UCM_OK);
  ucm_task_free(task);  // no wait first: free waits, so the buffers are complete now
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(dst[i], pl[i]) << i;
  ucm_task_free(nullptr);
  ucm_store_close(nullptr);
}

namespace {
struct LogSink {
  std::mutex mu;
  std::vector<std::pair<int, std::string>> lines;
};
void collect(int level, const char* msg, void* user) {
  auto* s = static_cast<LogSink*>(user);
  std::lock_guard<std::mutex> g(s->mu);
  s->lines.emplace_back(level, msg);
}
}  // namespace

// A server routes libucm's messages into its own log; nothing goes to stdout.
TEST(CApiBasics, LogCallbackReceivesTheLibrarysMessages) {
  LogSink sink;
  ucm_log_set_callback(collect, &sink, UCM_LOG_DEBUG);
  const std::string p = (fs::temp_directory_path() / ("ucm_capi_log_" + std::to_string(::getpid()))).string();
  fs::remove_all(p);
  ucm_store_t* st = nullptr;
  ASSERT_EQ(open_mode(p, UCM_OPEN_CREATE, &st), UCM_OK) << ucm_last_error();
  ucm_store_close(st);
  ucm_log_set_callback(nullptr, nullptr, UCM_LOG_INFO);
  fs::remove_all(p);
  std::lock_guard<std::mutex> g(sink.mu);
  ASSERT_FALSE(sink.lines.empty()) << "no message reached the callback";
  bool rocks = false;
  for (const auto& [level, line] : sink.lines) {
    EXPECT_GE(level, UCM_LOG_DEBUG);
    EXPECT_LE(level, UCM_LOG_ERROR);
    rocks = rocks || line.rfind("ucm.rocksdb: ", 0) == 0;
  }
  EXPECT_TRUE(rocks) << sink.lines.front().second;
}
