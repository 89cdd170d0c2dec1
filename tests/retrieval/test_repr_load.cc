// ucm_store_repr_info and ucm_store_load_repr (ucm/retrieval.h) against a store written with the
// C++ store API (ucm_core) and representation payloads encoded here, independently of the
// library (store_v1.md §4.3), with known values: round trips into F32 and same-dtype buffers,
// head ranges, slot offsets, fp16 conversion, per-block CORRUPTION for a bad section table or a
// bad checksum (slots untouched), NOT_FOUND, and the immediate errors. Also the section-table
// parser (formats/store/repr_table.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "capi_store.h"
#include "store_blocks.h"
#include "ucm/format/format.h"
#include "ucm/format/repr_table.h"
#include "repr_encode_reference.h"
#include "ucm/hash.h"
#include "ucm/retrieval.h"
#include "ucm/store.h"
#include "ucm/ucm.h"

namespace fs = std::filesystem;
using reprtest::Shape;

namespace {

// A store with namespaces "bf" (bf16) and "hf" (fp16), both L=2 H=3 D=8 T=4 B=16 with R0/R1/R4,
// "nor4" (R0/R1 only) and "plain" (no representations). Blocks 0..4 of "bf" and 0..1 of "hf" carry
// representations; block 3 of "bf" has a section table whose R0 length is wrong; block 5 of "bf"
// has none.
class ReprLoad : public ucm::test::CApiStoreTest {
 protected:
  ReprLoad() : CApiStoreTest("ucm_reprload_") {}
  void write(ucm::Store* s) override {
    bf = reg(s, "bf", ucm::DType::kBF16, R"({"hash_bits":16,"dense_layers":[1,70],"repr":["R0","R1","R4"]})");
    hf = reg(s, "hf", ucm::DType::kFP16, R"({"hash_bits":16,"dense_layers":[],"repr":["R0","R1","R4"]})");
    nor4 = reg(s, "nor4", ucm::DType::kBF16, R"({"repr":["R0","R1"]})");
    plain = reg(s, "plain", ucm::DType::kBF16, R"({})");
    dump(s, bf, ucm::DType::kBF16, 6, [](size_t i) { return i == 5 ? -1 : i == 3 ? 1 : 0; });
    dump(s, hf, ucm::DType::kFP16, 2, [](size_t) { return 0; });
    dump(s, nor4, ucm::DType::kBF16, 1, [](size_t) { return -1; });
    // Remember where block 4's representation record is, to damage it later.
    ucm::BlockInfo bi;
    ASSERT_TRUE(s->get_block(bf, hashes[bf][4], &bi).ok());
    repr4_file = ucm::fmt::data_file_path(path, bi.repr_file);
    repr4_payload = bi.repr_offset + ucm::fmt::kPage;
  }
  ucm::NamespaceId reg(ucm::Store* s, const char* name, ucm::DType dt, const char* extra) {
    ucm::NamespaceDesc d = ucm::test::test_ns(std::string("m-") + name, sh.L, sh.H, sh.D, sh.T, dt);
    d.weights_digest = "00";
    d.extra_json = extra;
    d.name = name;
    ucm::NamespaceId id{};
    EXPECT_TRUE(s->register_namespace(d, &id).ok());
    return id;
  }
  // mode(i): 0 good representations, 1 bad section table, -1 none.
  template <class F>
  void dump(ucm::Store* s, const ucm::NamespaceId& ns, ucm::DType dt, size_t n, F mode) {
    std::vector<uint32_t> toks(n * sh.T);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = uint32_t(i * 7 + ns[0]);
    auto& hs = hashes[ns];
    ucm::hash_blocks(ucm::root_hash(ns), toks.data(), toks.size(), sh.T, &hs);
    std::vector<std::vector<uint8_t>> kv(n), rp(n);
    std::vector<ucm::DumpItem> items(n);
    const size_t es = ucm::dtype_size(dt);
    for (size_t i = 0; i < n; ++i) {
      kv[i].assign(size_t{sh.L} * 2 * sh.T * sh.H * sh.D * es, uint8_t(i));
      items[i].hash = hs[i];
      items[i].parent = i ? hs[i - 1] : ucm::root_hash(ns);
      items[i].token_count = sh.T;
      items[i].kv = kv[i].data();
      if (mode(i) >= 0) {
        rp[i] = reprtest::encode(sh, dt == ucm::DType::kFP16, i, /*reverse order*/ i % 2 == 1, /*bad R0 length*/ mode(i) == 1);
        items[i].repr = rp[i].data();
        items[i].repr_len = rp[i].size();
      }
    }
    ASSERT_TRUE(s->dump(ns, items.data(), n)->wait().ok());
  }
  const uint8_t* id(const ucm::NamespaceId& ns) { return ns.data(); }
  const uint8_t* hs(const ucm::NamespaceId& ns) { return reinterpret_cast<const uint8_t*>(hashes[ns].data()); }

  Shape sh;
  std::string repr4_file;
  uint64_t repr4_payload = 0;
  ucm::NamespaceId bf{}, hf{}, nor4{}, plain{};
  std::map<ucm::NamespaceId, std::vector<ucm::BlockHash>> hashes;
};

// Loads n blocks of ns into fresh buffers (sentinel-filled) and returns the per-block codes.
struct Bufs {
  std::vector<float> f0, f1;
  std::vector<uint16_t> b0, b1;
  std::vector<uint8_t> r4;
  ucm_repr_buffers b{};
  Bufs(const Shape& sh, uint32_t h0, uint32_t h1, int32_t dtype, size_t cap) {
    const size_t Hs = (h0 == 0 && h1 == 0) ? sh.H : h1 - h0, rows = size_t{sh.L} * Hs * cap;
    b.struct_size = sizeof(b);
    b.head_begin = h0;
    b.head_end = h1;
    b.dtype = dtype;
    b.capacity = cap;
    if (dtype == UCM_DTYPE_F32) {
      f0.assign(rows * sh.D, -12345.0f);
      f1.assign(rows * 2 * sh.D, -12345.0f);
      b.r0 = f0.data();
      b.r1 = f1.data();
    } else {
      b0.assign(rows * sh.D, 0xBEEF);
      b1.assign(rows * 2 * sh.D, 0xBEEF);
      b.r0 = b0.data();
      b.r1 = b1.data();
    }
    r4.assign(rows * sh.T * sh.B / 8, 0xAB);
    b.r4 = r4.data();
  }
};

std::vector<int> load(ucm_store_t* ro, const uint8_t* ns, const uint8_t* hashes, size_t n, const ucm_repr_buffers& b,
                      size_t first) {
  ucm_task_t* t = nullptr;
  EXPECT_EQ(ucm_store_load_repr(ro, ns, hashes, n, &b, first, &t), UCM_OK) << ucm_last_error();
  if (!t) return {};
  (void)ucm_task_wait(t, -1);
  std::vector<int> st;
  for (size_t i = 0; i < n; ++i) st.push_back(ucm_task_block_status(t, i));
  ucm_task_free(t);
  return st;
}

// Checks slot `slot` of b (head range [h0, h0 + Hs)) against block `blk`'s known values, or the
// sentinels when blk < 0.
void check_slot(const Shape& sh, const Bufs& B, uint32_t h0, uint32_t Hs, size_t slot, int blk, bool fp16) {
  const size_t C = B.b.capacity, Bb = sh.B / 8;
  const bool f32 = B.b.dtype == UCM_DTYPE_F32;
  for (uint32_t l = 0; l < sh.L; ++l)
    for (uint32_t hh = 0; hh < Hs; ++hh) {
      const size_t row = (size_t{l} * Hs + hh) * C + slot;
      const uint32_t h = h0 + hh;
      for (uint32_t d = 0; d < sh.D; ++d)
        for (int k = 0; k < 3; ++k) {  // 0: R0, 1: R1 min, 2: R1 max
          const size_t i = k == 0 ? row * sh.D + d : row * 2 * sh.D + (k - 1) * sh.D + d;
          const float want = reprtest::value(k, size_t(blk < 0 ? 0 : blk), l, h, d);
          if (f32) {
            const float got = k == 0 ? B.f0[i] : B.f1[i];
            if (blk < 0) ASSERT_EQ(got, -12345.0f);
            else ASSERT_EQ(got, want) << "k " << k << " l " << l << " h " << h << " d " << d << " slot " << slot;
          } else {
            const uint16_t got = k == 0 ? B.b0[i] : B.b1[i];
            if (blk < 0) ASSERT_EQ(got, 0xBEEF);
            else ASSERT_EQ(got, fp16 ? reprtest::to_f16(want) : reprtest::to_bf16(want));
          }
        }
      for (uint32_t t = 0; t < sh.T; ++t)
        for (size_t j = 0; j < Bb; ++j) {
          const uint8_t got = B.r4[(row * sh.T + t) * Bb + j];
          ASSERT_EQ(got, blk < 0 ? 0xAB : reprtest::code_byte(size_t(blk), l, h, t, j)) << "slot " << slot;
        }
    }
}

TEST_F(ReprLoad, InfoDescribesTheNamespace) {
  ucm_repr_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(ucm_store_repr_info(ro, id(bf), &info), UCM_OK) << ucm_last_error();
  EXPECT_EQ(info.num_layers, sh.L);
  EXPECT_EQ(info.num_kv_heads, sh.H);
  EXPECT_EQ(info.head_dim, sh.D);
  EXPECT_EQ(info.block_size, sh.T);
  EXPECT_EQ(info.hash_bits, sh.B);
  EXPECT_EQ(info.dtype, UCM_DTYPE_BF16);
  EXPECT_EQ(info.sections, UCM_REPR_R0 | UCM_REPR_R1 | UCM_REPR_R4);
  EXPECT_EQ(info.dense_layers, uint64_t{1} << 1);  // layer 70 does not fit the mask
  ASSERT_EQ(ucm_store_repr_info(ro, id(hf), &info), UCM_OK);
  EXPECT_EQ(info.dtype, UCM_DTYPE_F16);
  EXPECT_EQ(info.dense_layers, 0u);
  ASSERT_EQ(ucm_store_repr_info(ro, id(nor4), &info), UCM_OK);
  EXPECT_EQ(info.sections, UCM_REPR_R0 | UCM_REPR_R1);
  EXPECT_EQ(info.hash_bits, 0u);
  EXPECT_EQ(ucm_store_repr_info(ro, id(plain), &info), UCM_E_NOT_SUPPORTED);
  const uint8_t unknown[16] = {1, 2, 3};
  EXPECT_EQ(ucm_store_repr_info(ro, unknown, &info), UCM_E_NOT_FOUND);
  info.struct_size = 4;
  EXPECT_EQ(ucm_store_repr_info(ro, id(bf), &info), UCM_E_INVALID);
  EXPECT_EQ(ucm_store_repr_info(ro, id(bf), nullptr), UCM_E_INVALID);
}

TEST_F(ReprLoad, AllHeadsToF32AtAnOffset) {
  Bufs B(sh, 0, 0, UCM_DTYPE_F32, 5);
  // blocks 0, 1, 2 into slots 1, 2, 3 (block 1 was written with its sections in reverse order).
  EXPECT_EQ(load(ro, id(bf), hs(bf), 3, B.b, 1), (std::vector<int>{UCM_OK, UCM_OK, UCM_OK}));
  check_slot(sh, B, 0, sh.H, 0, -1, false);
  for (int i = 0; i < 3; ++i) check_slot(sh, B, 0, sh.H, size_t(i + 1), i, false);
  check_slot(sh, B, 0, sh.H, 4, -1, false);
}

TEST_F(ReprLoad, HeadRangeInTheNamespaceDtype) {
  Bufs B(sh, 1, 3, UCM_DTYPE_BF16, 3);
  EXPECT_EQ(load(ro, id(bf), hs(bf), 3, B.b, 0), (std::vector<int>{UCM_OK, UCM_OK, UCM_OK}));
  for (int i = 0; i < 3; ++i) check_slot(sh, B, 1, 2, size_t(i), i, false);
  Bufs F(sh, 2, 3, UCM_DTYPE_F32, 2);
  EXPECT_EQ(load(ro, id(bf), hs(bf), 2, F.b, 0), (std::vector<int>{UCM_OK, UCM_OK}));
  for (int i = 0; i < 2; ++i) check_slot(sh, F, 2, 1, size_t(i), i, false);
}

TEST_F(ReprLoad, Fp16ConvertsAndCopies) {
  Bufs F(sh, 0, 0, UCM_DTYPE_F32, 2);
  EXPECT_EQ(load(ro, id(hf), hs(hf), 2, F.b, 0), (std::vector<int>{UCM_OK, UCM_OK}));
  for (int i = 0; i < 2; ++i) check_slot(sh, F, 0, sh.H, size_t(i), i, true);
  Bufs H(sh, 0, 0, UCM_DTYPE_F16, 2);
  EXPECT_EQ(load(ro, id(hf), hs(hf), 2, H.b, 0), (std::vector<int>{UCM_OK, UCM_OK}));
  for (int i = 0; i < 2; ++i) check_slot(sh, H, 0, sh.H, size_t(i), i, true);
}

TEST_F(ReprLoad, BadBlocksFailAloneAndLeaveTheirSlots) {
  // Damage block 4's record on disk (one payload byte): its checksum no longer matches.
  {
    std::fstream f(repr4_file, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekg(std::streamoff(repr4_payload + 100));
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x5a);
    f.seekp(std::streamoff(repr4_payload + 100));
    f.write(&c, 1);
  }
  Bufs B(sh, 0, 0, UCM_DTYPE_F32, 6);
  // block 3: bad section table; 4: bad checksum; 5: no representations.
  EXPECT_EQ(load(ro, id(bf), hs(bf), 6, B.b, 0),
            (std::vector<int>{UCM_OK, UCM_OK, UCM_OK, UCM_E_CORRUPTION, UCM_E_CORRUPTION, UCM_E_NOT_FOUND}));
  for (int i = 0; i < 3; ++i) check_slot(sh, B, 0, sh.H, size_t(i), i, false);
  for (int i = 3; i < 6; ++i) check_slot(sh, B, 0, sh.H, size_t(i), -1, false);
  // A block of another namespace is a miss here.
  EXPECT_EQ(load(ro, id(bf), hs(hf), 1, B.b, 0), (std::vector<int>{UCM_E_NOT_FOUND}));
}

TEST_F(ReprLoad, ImmediateErrorsCreateNoTask) {
  Bufs B(sh, 0, 0, UCM_DTYPE_F32, 2);
  ucm_task_t* t = reinterpret_cast<ucm_task_t*>(0x1);
  auto expect = [&](int code, const uint8_t* ns, const ucm_repr_buffers* b, size_t n, size_t first, const char* word) {
    t = reinterpret_cast<ucm_task_t*>(0x1);
    EXPECT_EQ(ucm_store_load_repr(ro, ns, hs(bf), n, b, first, &t), code) << word;
    EXPECT_EQ(t, nullptr) << word;
    EXPECT_NE(std::string(ucm_last_error()).find(word), std::string::npos) << ucm_last_error();
  };
  expect(UCM_E_INVALID, id(bf), &B.b, 2, 1, "capacity");
  ucm_repr_buffers b = B.b;
  b.head_begin = 1;
  b.head_end = 4;
  expect(UCM_E_INVALID, id(bf), &b, 1, 0, "head range");
  b = B.b;
  b.dtype = UCM_DTYPE_F16;
  expect(UCM_E_INVALID, id(bf), &b, 1, 0, "dtype");
  b = B.b;
  b.r0 = b.r1 = nullptr;
  b.r4 = nullptr;
  expect(UCM_E_INVALID, id(bf), &b, 1, 0, "no array");
  b = B.b;
  b.struct_size = 8;
  expect(UCM_E_INVALID, id(bf), &b, 1, 0, "struct_size");
  expect(UCM_E_INVALID, id(nor4), &B.b, 1, 0, "r4");
  expect(UCM_E_NOT_SUPPORTED, id(plain), &B.b, 1, 0, "representations");
  const uint8_t unknown[16] = {9};
  expect(UCM_E_NOT_FOUND, unknown, &B.b, 1, 0, "");
  EXPECT_EQ(ucm_store_load_repr(ro, id(bf), hs(bf), 1, nullptr, 0, &t), UCM_E_INVALID);
  EXPECT_EQ(ucm_store_load_repr(ro, id(bf), hs(bf), 1, &B.b, 0, nullptr), UCM_E_INVALID);
}

TEST(ReprTable, ParserRejectsMalformedTables) {
  Shape sh;
  const auto good = reprtest::encode(sh, false, 0, false, false);
  std::vector<ucm::fmt::ReprSectionRef> t;
  ASSERT_TRUE(ucm::fmt::parse_repr_table(good.data(), good.size(), &t).ok());
  ASSERT_EQ(t.size(), 3u);
  const ucm::fmt::ReprShape rs{sh.L, sh.H, sh.D, sh.T, sh.B};
  const ucm::fmt::ReprSectionRef* s = nullptr;
  ASSERT_TRUE(ucm::fmt::find_repr_section(t, ucm::fmt::kReprR4SignHash, rs, &s).ok());
  EXPECT_EQ(s->length, uint64_t{sh.L} * sh.H * sh.T * sh.B / 8);
  EXPECT_EQ(ucm::fmt::find_repr_section(t, 7, rs, &s).code(), ucm::Code::kNotFound);
  auto expect_corrupt = [&](std::vector<uint8_t> p, const char* what) {
    EXPECT_EQ(ucm::fmt::parse_repr_table(p.data(), p.size(), &t).code(), ucm::Code::kCorruption) << what;
  };
  auto v = good;
  v[0] = 'X';
  expect_corrupt(v, "magic");
  v = good;
  ucm::fmt::put_le32(v.data() + 4, 0);
  expect_corrupt(v, "no section");
  v = good;
  ucm::fmt::put_le32(v.data() + 4, 1000);
  expect_corrupt(v, "too many sections");
  v = good;
  ucm::fmt::put_le64(v.data() + 8 + 8, 16);  // section 0 inside the table
  expect_corrupt(v, "overlaps the table");
  v = good;
  ucm::fmt::put_le64(v.data() + 8 + 16, good.size());  // section 0 runs past the end
  expect_corrupt(v, "past the end");
  v = good;
  ucm::fmt::put_le32(v.data() + 8 + 24, 0);  // section 1 is a second R0
  expect_corrupt(v, "duplicate kind");
  expect_corrupt(std::vector<uint8_t>(good.begin(), good.begin() + 6), "truncated");
  // Known table, wrong shape: a different D makes every length wrong.
  ASSERT_TRUE(ucm::fmt::parse_repr_table(good.data(), good.size(), &t).ok());
  const ucm::fmt::ReprShape other{sh.L, sh.H, sh.D * 2, sh.T, sh.B};
  EXPECT_EQ(ucm::fmt::find_repr_section(t, ucm::fmt::kReprR0MeanKey, other, &s).code(), ucm::Code::kCorruption);
}

}  // namespace
