// The C ABI's two size rules (ucm/ucm.h, "Structs that grow" and "Sized outputs"), through
// libucm.so; the store is written beforehand with the C++ API (ucm_core).
//  - Every params / info struct: the previous release's size is accepted and the fields it lacks
//    take their defaults; a size below the struct's minimum is UCM_E_INVALID; a newer, larger
//    size is accepted. The previous releases' layouts are written out here as C structs.
//  - Out-structs (ucm_repr_info, ucm_rope_params, ucm_retriever_params_load) are never written
//    past the caller's struct_size (guard bytes).
//  - The five sized outputs: NULL = a size query; too small = UCM_E_INVALID, nothing written.
//  - The growth helper itself (ucm/core/c_struct.h) on a struct whose minimum is below its size.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "capi_store.h"
#include "store_blocks.h"
#include "ucm/blend.h"
#include "ucm/core/c_struct.h"
#include "ucm/hash.h"
#include "ucm/retrieval.h"
#include "ucm/store.h"
#include "ucm/ucm.h"

namespace fs = std::filesystem;

namespace {

constexpr uint32_t L = 2, H = 2, D = 8, T = 4;
constexpr size_t kPayload = size_t{L} * 2 * T * H * D * 2;  // bf16
const char* kRope = R"({"style":"rotate_half","theta":100000.0,"head_dim":8,"scaling":{"type":"none"}})";
const std::string kSource = "corpus/docs.jsonl:7";
const std::string kProjection(L * H * D * 16 * 4, '\x01');

// A struct of the caller's followed by bytes the library must not write (nor read).
template <class S>
struct Guarded {
  S s;
  unsigned char guard[64];
  /// Every byte 0xAB (what the library must neither read nor write), then s.struct_size = n.
  void reset(size_t n) {
    std::memset(static_cast<void*>(this), 0xAB, sizeof *this);
    s.struct_size = static_cast<decltype(s.struct_size)>(n);
  }
};

bool guard_intact(const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0xAB) return false;
  return true;
}

bool error_names_struct_size() { return std::string(ucm_last_error()).find("struct_size") != std::string::npos; }

// One namespace "g" (bf16, L=2 H=2 D=8 T=4, R0/R1/R4 with B=16) with one block, a `rope`
// attachment, an r4_projection attachment and a document entry.
class Growth : public ucm::test::CApiStoreTest {
 protected:
  Growth() : CApiStoreTest("ucm_growth_") {}
  void write(ucm::Store* s) override {
    ucm::NamespaceDesc d = ucm::test::test_ns("growth", L, H, D, T);
    d.weights_digest = "00";
    d.extra_json = R"({"hash_bits":16,"repr":["R0","R1","R4"]})";
    d.name = "g";
    ASSERT_TRUE(s->register_namespace(d, &ns).ok());
    ASSERT_TRUE(s->put_attachment(ns, "rope", kRope, std::strlen(kRope)).ok());
    ASSERT_TRUE(s->put_attachment(ns, "r4_projection", kProjection.data(), kProjection.size()).ok());
    std::vector<uint32_t> toks(T, 5);
    std::vector<ucm::BlockHash> hs;
    ucm::hash_blocks(ucm::root_hash(ns), toks.data(), toks.size(), T, &hs);
    hash = hs[0];
    payload.resize(kPayload);
    for (size_t i = 0; i < kPayload; ++i) payload[i] = uint8_t(i * 7 + 3);
    ucm::DumpItem it;
    it.hash = hash;
    it.parent = ucm::root_hash(ns);
    it.token_count = T;
    it.kv = payload.data();
    ASSERT_TRUE(s->dump(ns, &it, 1)->wait().ok());
    ucm::DocumentEntry e;
    e.id = "doc1";
    e.first_block = e.last_block = hash;
    e.blocks = 1;
    e.tokens = T;
    e.source = kSource;
    ASSERT_TRUE(s->put_document(ns, e).ok());
  }
  ucm_repr_info info() {
    ucm_repr_info i{};
    i.struct_size = sizeof i;
    EXPECT_EQ(ucm_store_repr_info(ro, ns.data(), &i), UCM_OK) << ucm_last_error();
    return i;
  }

  ucm::NamespaceId ns{};
  ucm::BlockHash hash{};
  std::vector<uint8_t> payload;
};

}  // namespace

// ---- in-structs: the previous release's size, one field short, a newer size --------------------

// ucm_store_open_params has not grown since 0.2.0: 0.5.2's size is all of it.
TEST_F(Growth, OpenParamsPreviousSizeShortAndNewer) {
  ucm_store_open_params p = ucm_store_default_open_params();
  p.refresh_interval_ms = 0;
  ucm_store_t* s = nullptr;
  ASSERT_EQ(ucm_store_open(path.c_str(), &p, &s), UCM_OK) << ucm_last_error();
  ucm_store_close(s);
  Guarded<ucm_store_open_params> g;
  std::memset(&g, 0xAB, sizeof g);  // the "newer" fields: garbage this library must ignore
  g.s = p;
  g.s.struct_size = sizeof(g);
  ASSERT_EQ(ucm_store_open(path.c_str(), &g.s, &s), UCM_OK) << ucm_last_error();
  ucm_store_close(s);
  p.struct_size = offsetof(ucm_store_open_params, reader_dir);
  EXPECT_EQ(ucm_store_open(path.c_str(), &p, &s), UCM_E_INVALID);
  EXPECT_TRUE(error_names_struct_size()) << ucm_last_error();
  EXPECT_EQ(s, nullptr);
}

// The first ucm_store_load_params (what ucm_store_load takes) ends at head_end: the device fields
// take their defaults; the bytes after it are not read.
TEST_F(Growth, LoadParamsHostPartTakesTheDefaults) {
  struct LoadParamsHost {  // ucm_store_load_params through head_end
    uint32_t struct_size;
    int32_t dest_kind;
    void* const* ptrs;
    uint32_t head_begin, head_end;
  };
  static_assert(sizeof(LoadParamsHost) == UCM_SIZE_THROUGH(ucm_store_load_params, head_end));
  std::vector<uint8_t> dst(kPayload, 0);
  void* ptrs[1] = {dst.data()};
  Guarded<LoadParamsHost> g;
  std::memset(&g, 0xAB, sizeof g);  // layer_caches, slots, ... garbage if they were read
  g.s = {sizeof(LoadParamsHost), UCM_DEST_CONTIGUOUS, ptrs, 0, 0};
  ucm_task_t* task = nullptr;
  ASSERT_EQ(ucm_store_load_ex(ro, ns.data(), hash.data(), 1, reinterpret_cast<const ucm_store_load_params*>(&g.s),
                              &task),
            UCM_OK)
      << ucm_last_error();
  EXPECT_EQ(ucm_task_wait(task, -1), UCM_OK) << ucm_last_error();
  ucm_task_free(task);
  EXPECT_EQ(dst, payload);
  g.s.struct_size = UCM_SIZE_THROUGH(ucm_store_load_params, head_begin);
  EXPECT_EQ(ucm_store_load_ex(ro, ns.data(), hash.data(), 1, reinterpret_cast<const ucm_store_load_params*>(&g.s),
                              &task),
            UCM_E_INVALID);
  EXPECT_TRUE(error_names_struct_size()) << ucm_last_error();
  EXPECT_EQ(task, nullptr);
}

// 0.4.0's ucm_blend_select_params ended at position_decay (relevance_exponent came in 0.5.0):
// such a caller gets relevance_exponent's default, 2, and the bytes after are not read.
TEST(GrowthBlend, SelectParamsOf04TakeTheDefaultExponent) {
  struct BlendSelectParams04 {
    uint32_t struct_size;
    double ratio;
    double position_decay;
  };
  static_assert(sizeof(BlendSelectParams04) == UCM_SIZE_THROUGH(ucm_blend_select_params, position_decay));
  const size_t n = 8;
  const std::vector<float> rel = {0.1f, 4.f, 0.2f, 0.3f, 2.f, 0.1f, 0.5f, 0.6f};
  auto run = [&](const ucm_blend_select_params* p, std::vector<float>* score) {
    std::vector<uint32_t> idx(n);
    size_t k = 0;
    score->assign(n, 0.f);
    EXPECT_EQ(ucm_blend_select_relevant(p, nullptr, nullptr, nullptr, rel.data(), n, 1, idx.data(), n, &k,
                                        score->data()),
              UCM_OK)
        << ucm_last_error();
    idx.resize(k);
    return idx;
  };
  Guarded<BlendSelectParams04> g;
  std::memset(&g, 0xFF, sizeof g);  // a relevance_exponent of NaN if it were read: UCM_E_INVALID
  g.s = {sizeof(BlendSelectParams04), 0.25, 0.0};
  std::vector<float> s_old, s_two, s_zero;
  const auto old = run(reinterpret_cast<const ucm_blend_select_params*>(&g.s), &s_old);
  ucm_blend_select_params p = ucm_blend_select_default_params();
  p.ratio = 0.25;
  p.position_decay = 0;
  ASSERT_EQ(p.relevance_exponent, 2.0);
  const auto two = run(&p, &s_two);
  EXPECT_EQ(old, two);
  EXPECT_EQ(s_old, s_two);
  EXPECT_EQ(s_old[1], 16.f);  // relevance^2
  p.relevance_exponent = 0;  // the default matters: exponent 0 scores differently
  run(&p, &s_zero);
  EXPECT_NE(s_zero, s_two);
  g.s.struct_size = UCM_SIZE_THROUGH(ucm_blend_select_params, ratio);
  std::vector<uint32_t> idx(n);
  size_t k = 0;
  EXPECT_EQ(ucm_blend_select_relevant(reinterpret_cast<const ucm_blend_select_params*>(&g.s), nullptr, nullptr,
                                      nullptr, rel.data(), n, 1, idx.data(), n, &k, nullptr),
            UCM_E_INVALID);
  EXPECT_TRUE(error_names_struct_size()) << ucm_last_error();
}

// ucm_rope_params got its uint32_t struct_size in 0.6.0, its first layout: all of it is the
// minimum. A newer, larger struct is accepted (its extra bytes ignored).
TEST(GrowthBlend, RopeParamsShortAndNewer) {
  std::vector<float> k(2 * 8, 1.f);
  Guarded<ucm_rope_params> g;
  std::memset(&g, 0xAB, sizeof g);
  g.s = ucm_rope_default_params();
  g.s.head_dim = 8;
  EXPECT_EQ(g.s.struct_size, sizeof(ucm_rope_params));
  ASSERT_EQ(ucm_rope_shift(&g.s, k.data(), UCM_DTYPE_F32, 2, 1, 8, 3), UCM_OK) << ucm_last_error();
  g.s.struct_size = sizeof g;
  EXPECT_EQ(ucm_rope_shift(&g.s, k.data(), UCM_DTYPE_F32, 2, 1, 8, -3), UCM_OK) << ucm_last_error();
  for (float x : k) EXPECT_NEAR(x, 1.f, 1e-5);
  g.s.struct_size = offsetof(ucm_rope_params, original_max_position_embeddings);
  EXPECT_EQ(ucm_rope_shift(&g.s, k.data(), UCM_DTYPE_F32, 2, 1, 8, 3), UCM_E_INVALID);
  EXPECT_TRUE(error_names_struct_size()) << ucm_last_error();
}

// retrieval.h's structs have not grown since 0.2.0: 0.5.2's size is all of each.
TEST_F(Growth, RetrievalStructsPreviousSizeShortAndNewer) {
  const ucm_repr_info in = info();
  // ucm_retriever_params and ucm_repr_info into ucm_retriever_create.
  Guarded<ucm_retriever_params> gp;
  std::memset(&gp, 0xAB, sizeof gp);
  gp.s = ucm_retriever_default_params();
  Guarded<ucm_repr_info> gi;
  std::memset(&gi, 0xAB, sizeof gi);
  gi.s = in;
  ucm_retriever_t* r = nullptr;
  ASSERT_EQ(ucm_retriever_create(&gp.s, &gi.s, nullptr, &r), UCM_OK) << ucm_last_error();
  ucm_retriever_free(r);
  gp.s.struct_size = sizeof gp;
  gi.s.struct_size = sizeof gi;
  ASSERT_EQ(ucm_retriever_create(&gp.s, &gi.s, nullptr, &r), UCM_OK) << ucm_last_error();
  ucm_retriever_free(r);
  gp.s.struct_size = offsetof(ucm_retriever_params, honor_dense_layers);
  EXPECT_EQ(ucm_retriever_create(&gp.s, &gi.s, nullptr, &r), UCM_E_INVALID);
  EXPECT_TRUE(error_names_struct_size()) << ucm_last_error();
  gp.s.struct_size = sizeof(ucm_retriever_params);
  gi.s.struct_size = offsetof(ucm_repr_info, dense_layers);
  EXPECT_EQ(ucm_retriever_create(&gp.s, &gi.s, nullptr, &r), UCM_E_INVALID);
  EXPECT_TRUE(error_names_struct_size()) << ucm_last_error();
  // ucm_repr_info into ucm_repr_encode.
  std::vector<float> keys(size_t{L} * T * H * D, 0.5f), proj(size_t{L} * H * D * 16, 1.f);
  size_t len = 0;
  gi.s.struct_size = sizeof gi;
  EXPECT_EQ(ucm_repr_encode(&gi.s, keys.data(), proj.data(), nullptr, 0, &len), UCM_E_INVALID);
  EXPECT_GT(len, 0u);
  gi.s.struct_size = offsetof(ucm_repr_info, dense_layers);
  len = 0;
  EXPECT_EQ(ucm_repr_encode(&gi.s, keys.data(), proj.data(), nullptr, 0, &len), UCM_E_INVALID);
  EXPECT_TRUE(error_names_struct_size()) << ucm_last_error();
  EXPECT_EQ(len, 0u);
  // ucm_repr_buffers into ucm_store_load_repr, and ucm_retrieval_query (with its buffers) into
  // ucm_retriever_select.
  std::vector<float> r0(size_t{L} * H * D), r1(size_t{L} * H * 2 * D);
  Guarded<ucm_repr_buffers> gb;
  std::memset(&gb, 0xAB, sizeof gb);
  gb.s = ucm_repr_buffers{};
  gb.s.struct_size = sizeof gb;
  gb.s.dtype = UCM_DTYPE_F32;
  gb.s.capacity = 1;
  gb.s.r0 = r0.data();
  gb.s.r1 = r1.data();
  ucm_task_t* task = nullptr;
  ASSERT_EQ(ucm_store_load_repr(ro, ns.data(), hash.data(), 1, &gb.s, 0, &task), UCM_OK) << ucm_last_error();
  EXPECT_EQ(ucm_task_wait(task, -1), UCM_E_NOT_FOUND);  // the block was stored without representations
  ucm_task_free(task);
  gb.s.struct_size = offsetof(ucm_repr_buffers, r4);
  EXPECT_EQ(ucm_store_load_repr(ro, ns.data(), hash.data(), 1, &gb.s, 0, &task), UCM_E_INVALID);
  EXPECT_TRUE(error_names_struct_size()) << ucm_last_error();
  gb.s.struct_size = sizeof(ucm_repr_buffers);
  ucm_retriever_params p = ucm_retriever_default_params();
  ASSERT_EQ(ucm_retriever_create(&p, &in, nullptr, &r), UCM_OK) << ucm_last_error();
  std::vector<float> q(size_t{H} * D, 1.f);
  Guarded<ucm_retrieval_query> gq;
  std::memset(&gq, 0xAB, sizeof gq);
  gq.s = ucm_retrieval_query{};
  gq.s.struct_size = sizeof gq;
  gq.s.q = q.data();
  gq.s.q_dtype = UCM_DTYPE_F32;
  gq.s.n_q_heads = H;
  gq.s.group_size = 1;
  gq.s.reprs = &gb.s;
  gq.s.n_blocks = 1;
  std::vector<uint32_t> idx(H), counts(H);
  uint32_t sets = 0;
  EXPECT_EQ(ucm_retriever_select(r, &gq.s, idx.data(), 1, counts.data(), &sets), UCM_OK) << ucm_last_error();
  EXPECT_EQ(sets, 1u);
  EXPECT_EQ(counts[0], 1u);
  gq.s.struct_size = offsetof(ucm_retrieval_query, top_k);
  EXPECT_EQ(ucm_retriever_select(r, &gq.s, idx.data(), 1, counts.data(), &sets), UCM_E_INVALID);
  EXPECT_TRUE(error_names_struct_size()) << ucm_last_error();
  gq.s.struct_size = sizeof(ucm_retrieval_query);
  gb.s.struct_size = 4;  // the buffers a query points at follow the rule too
  EXPECT_EQ(ucm_retriever_select(r, &gq.s, idx.data(), 1, counts.data(), &sets), UCM_E_INVALID);
  EXPECT_TRUE(error_names_struct_size()) << ucm_last_error();
  ucm_retriever_free(r);
}

// ---- out-structs: never written past the caller's struct_size -------------------------------

TEST_F(Growth, ReprInfoIsWrittenUpToTheCallersSize) {
  Guarded<ucm_repr_info> g;
  g.reset(sizeof(ucm_repr_info));
  ASSERT_EQ(ucm_store_repr_info(ro, ns.data(), &g.s), UCM_OK) << ucm_last_error();
  EXPECT_EQ(g.s.num_layers, L);
  EXPECT_EQ(g.s.hash_bits, 16u);
  EXPECT_EQ(g.s.dtype, UCM_DTYPE_BF16);
  EXPECT_TRUE(guard_intact(g.guard, sizeof g.guard));
  // A newer caller's larger struct: this library writes its own fields only, and keeps the size.
  g.reset(sizeof(ucm_repr_info) + 16);
  ASSERT_EQ(ucm_store_repr_info(ro, ns.data(), &g.s), UCM_OK) << ucm_last_error();
  EXPECT_EQ(g.s.struct_size, sizeof(ucm_repr_info) + 16);
  EXPECT_EQ(g.s.head_dim, D);
  EXPECT_TRUE(guard_intact(g.guard, sizeof g.guard));
  // Below the minimum: UCM_E_INVALID and nothing written.
  g.reset(offsetof(ucm_repr_info, dense_layers));
  EXPECT_EQ(ucm_store_repr_info(ro, ns.data(), &g.s), UCM_E_INVALID);
  EXPECT_TRUE(error_names_struct_size()) << ucm_last_error();
  EXPECT_TRUE(guard_intact(reinterpret_cast<unsigned char*>(&g) + 4, sizeof g - 4));
}

TEST_F(Growth, RopeParamsAreWrittenUpToTheCallersSize) {
  Guarded<ucm_rope_params> g;
  g.reset(sizeof(ucm_rope_params));
  ASSERT_EQ(ucm_store_rope_params(ro, ns.data(), &g.s), UCM_OK) << ucm_last_error();
  EXPECT_EQ(g.s.head_dim, D);
  EXPECT_EQ(g.s.theta, 100000.0);
  EXPECT_EQ(g.s.scaling, UCM_ROPE_SCALING_NONE);
  EXPECT_EQ(g.s.struct_size, sizeof(ucm_rope_params));
  EXPECT_TRUE(guard_intact(g.guard, sizeof g.guard));
  g.reset(sizeof(ucm_rope_params) + 8);
  ASSERT_EQ(ucm_store_rope_params(ro, ns.data(), &g.s), UCM_OK) << ucm_last_error();
  EXPECT_EQ(g.s.struct_size, sizeof(ucm_rope_params) + 8);
  EXPECT_TRUE(guard_intact(g.guard, sizeof g.guard));
  g.reset(8);
  EXPECT_EQ(ucm_store_rope_params(ro, ns.data(), &g.s), UCM_E_INVALID);
  EXPECT_TRUE(guard_intact(reinterpret_cast<unsigned char*>(&g) + 4, sizeof g - 4));
}

TEST(GrowthRetrieval, ParamsLoadWritesUpToTheCallersSize) {
  const std::string f =
      (fs::temp_directory_path() / ("ucm_growth_" + std::to_string(::getpid()) + ".yaml")).string();
  { std::ofstream(f) << "sink_blocks: 3\n"; }
  Guarded<ucm_retriever_params> g;
  g.reset(sizeof(ucm_retriever_params));
  ASSERT_EQ(ucm_retriever_params_load(f.c_str(), &g.s), UCM_OK) << ucm_last_error();
  EXPECT_EQ(g.s.sink_blocks, 3u);
  EXPECT_EQ(g.s.local_blocks, ucm_retriever_default_params().local_blocks);
  EXPECT_TRUE(guard_intact(g.guard, sizeof g.guard));
  g.reset(0);  // not set: the caller must say how much it has
  EXPECT_EQ(ucm_retriever_params_load(f.c_str(), &g.s), UCM_E_INVALID);
  EXPECT_TRUE(error_names_struct_size()) << ucm_last_error();
  EXPECT_TRUE(guard_intact(reinterpret_cast<unsigned char*>(&g) + 4, sizeof g - 4));
  fs::remove(f);
}

// ---- sized outputs: one behaviour in the five functions that have them ------------------------

TEST_F(Growth, SizedOutputsBehaveOneWay) {
  struct Case {
    const char* name;
    bool text;
    // Calls the function with (buf, cap, len); len may be ignored (document_get has none).
    std::function<int(char*, size_t, size_t*)> call;
  };
  const Case cases[] = {
      {"namespace_find", true,
       [&](char* b, size_t c, size_t* l) {
         uint8_t id[16];
         return ucm_store_namespace_find(ro, "g", id, b, c, l);
       }},
      {"namespace_list", true, [&](char* b, size_t c, size_t* l) { return ucm_store_namespace_list(ro, b, c, l); }},
      {"attachment_get", false,
       [&](char* b, size_t c, size_t* l) { return ucm_store_attachment_get(ro, ns.data(), "rope", b, c, l); }},
      {"document_get", true,
       [&](char* b, size_t c, size_t* l) {
         *l = kSource.size();  // no length parameter: the test knows it
         uint64_t blocks = 0;
         const int rc = ucm_store_document_get(ro, ns.data(), "doc1", b, c, &blocks, nullptr);
         EXPECT_EQ(blocks, 1u);
         return rc;
       }},
      {"metrics", true, [&](char* b, size_t c, size_t* l) { return ucm_store_metrics(ro, b, c, l); }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    size_t need = 0;
    ASSERT_EQ(c.call(nullptr, 0, &need), UCM_OK) << ucm_last_error();  // a size query
    ASSERT_GT(need, 0u);
    const size_t full = need + (c.text ? 1 : 0);
    std::string buf(full + 8, 'x');
    size_t got = 0;
    EXPECT_EQ(c.call(buf.data(), full - 1, &got), UCM_E_INVALID);  // one byte short
    EXPECT_EQ(got, need);
    EXPECT_EQ(buf, std::string(full + 8, 'x')) << "written although too small";
    EXPECT_NE(std::string(ucm_last_error()).find(std::to_string(full)), std::string::npos) << ucm_last_error();
    ASSERT_EQ(c.call(buf.data(), full, &got), UCM_OK) << ucm_last_error();
    EXPECT_EQ(got, need);
    if (c.text) {
      EXPECT_EQ(buf[need], '\0');
    }
    EXPECT_EQ(buf.substr(full), std::string(8, 'x')) << "written past the output";
    if (std::string(c.name) == "attachment_get") {
      EXPECT_EQ(buf.substr(0, need), kRope);
    }
    if (std::string(c.name) == "document_get") {
      EXPECT_EQ(buf.substr(0, need), kSource);
    }
  }
}

TEST(GrowthBasics, FormatVersionIsTheNewest) { EXPECT_EQ(ucm_format_version(), 5u); }

// ---- the helper itself, on a struct whose minimum is below its size ---------------------------

namespace {
struct Grown {
  uint32_t struct_size;
  uint32_t a;
  double b;  // added "later": the minimum ends at a
};
}  // namespace
namespace ucm::capi {
template <>
inline constexpr size_t kMinStructSize<Grown> = UCM_SIZE_THROUGH(Grown, a);
}  // namespace ucm::capi

TEST(GrowthHelper, ReadTakesDefaultsAndWriteStopsAtTheCallersSize) {
  const Grown defaults{sizeof(Grown), 1, 2.5};
  Guarded<Grown> in;
  std::memset(&in, 0xAB, sizeof in);
  in.s.struct_size = UCM_SIZE_THROUGH(Grown, a);
  in.s.a = 7;
  Grown v{};
  ASSERT_TRUE(ucm::capi::read_struct("p", &in.s, defaults, &v).ok());
  EXPECT_EQ(v.struct_size, sizeof(Grown));
  EXPECT_EQ(v.a, 7u);
  EXPECT_EQ(v.b, 2.5);  // not the caller's 0xAB bytes
  in.s.struct_size = 4;
  const ucm::Status s = ucm::capi::read_struct("p", &in.s, defaults, &v);
  EXPECT_EQ(s.code(), ucm::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("p->struct_size 4"), std::string::npos) << s.ToString();
  Guarded<Grown> out;
  std::memset(&out, 0xAB, sizeof out);
  out.s.struct_size = UCM_SIZE_THROUGH(Grown, a);
  ASSERT_TRUE(ucm::capi::write_struct("o", Grown{sizeof(Grown), 9, 1.0}, &out.s).ok());
  EXPECT_EQ(out.s.struct_size, UCM_SIZE_THROUGH(Grown, a));
  EXPECT_EQ(out.s.a, 9u);
  EXPECT_TRUE(guard_intact(reinterpret_cast<unsigned char*>(&out) + UCM_SIZE_THROUGH(Grown, a),
                           sizeof out - UCM_SIZE_THROUGH(Grown, a)));
}
