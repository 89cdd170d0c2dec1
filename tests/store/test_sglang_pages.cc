// SGLang page aliases (store_v1.md §12.1): the table's bytes against the spec, built byte by byte
// here; the builder over a store's documents (ucm/sglang_pages.h); the C ABI's lookup (a page is
// present only when all its blocks are); and the strided paged loads the ucm.sglang backend uses
// to write pages straight into SGLang's host pool layouts (ucm_store_load_ex token/head strides).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "store_blocks.h"
#include "temp_dir.h"
#include "ucm/format/format.h"
#include "ucm/hash.h"
#include "ucm/sglang_keys.h"
#include "ucm/sglang_pages.h"
#include "ucm/store.h"
#include "ucm/ucm.h"

using namespace ucm;
namespace fs = std::filesystem;

namespace {

std::string tmpdir(const std::string& tag) { return test::tmpdir("ucm_sglpages_", tag); }

// Closes a page table and its store (C ABI), then removes the store at p.
void close_and_remove(ucm_sglang_pages_t* pages, ucm_store_t* st, const std::string& p) {
  ucm_sglang_pages_close(pages);
  ucm_store_close(st);
  fs::remove_all(p);
}

BlockHash bh(uint8_t v) {
  BlockHash h;
  h.fill(v);
  return h;
}
fmt::SglangPageKey pk(uint8_t v) {
  fmt::SglangPageKey k;
  k.fill(v);
  return k;
}

// A chain of `blocks` 16-token blocks of random ids (seeded), dumped with their ids, its hashes out.
std::vector<BlockHash> dump_chain(Store* s, const NamespaceId& ns, const NamespaceDesc& d, std::vector<uint32_t>* toks,
                                  bool with_ids = true) {
  const BlockHash root = root_hash(d.hash_seed());
  std::vector<BlockHash> hs;
  hash_blocks(root, toks->data(), toks->size(), d.block_size, &hs);
  std::vector<std::vector<uint8_t>> keep(hs.size());
  std::vector<DumpItem> items(hs.size());
  for (size_t i = 0; i < hs.size(); ++i) {
    keep[i] = test::block_payload(hs[i], d.payload_bytes());
    items[i].hash = hs[i];
    items[i].parent = i ? hs[i - 1] : root;
    items[i].token_count = d.block_size;
    items[i].kv = keep[i].data();
    if (with_ids) items[i].tokens = toks->data() + i * d.block_size;
  }
  EXPECT_TRUE(s->dump(ns, items.data(), items.size())->wait().ok());
  return hs;
}

std::vector<uint32_t> random_ids(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> v(n);
  for (auto& t : v) t = rng() % 49152;
  return v;
}

void add_doc(Store* s, const NamespaceId& ns, const std::string& id, const std::vector<BlockHash>& hs) {
  DocumentEntry e;
  e.id = id;
  e.first_block = hs.front();
  e.last_block = hs.back();
  e.blocks = uint32_t(hs.size());
  e.tokens = hs.size() * 16;
  ASSERT_TRUE(s->put_document(ns, e).ok());
}

}  // namespace

TEST(SglangPagesFormat, BytesAsTheSpecSays) {
  fmt::SglangPages t;
  t.page_size = 32;
  t.block_size = 16;
  t.keys = {pk(0xbb), pk(0xaa)};  // encode sorts: 0xaa first
  t.blocks = {bh(1), bh(2), bh(3), bh(4)};
  std::string b;
  ASSERT_TRUE(fmt::encode_sglang_pages(t, &b).ok());
  // §12.1: header 64, 2 entries of 32 + 16 x 2, checksum 8.
  std::string want("UCMSGPA\0", 8);
  auto u32 = [&](uint32_t v) { for (int i = 0; i < 4; ++i) want.push_back(char(v >> (8 * i))); };
  u32(1);   // version
  u32(32);  // page_size
  u32(16);  // block_size
  u32(0);   // seeded
  want.append(32, '\0');                                   // seed
  want.append("\x02\0\0\0\0\0\0\0", 8);                   // entry_count
  want.append(32, char(0xaa)); want.append(16, char(3)); want.append(16, char(4));
  want.append(32, char(0xbb)); want.append(16, char(1)); want.append(16, char(2));
  const uint64_t sum = fmt::xxh3(want.data(), want.size());
  for (int i = 0; i < 8; ++i) want.push_back(char(sum >> (8 * i)));
  ASSERT_EQ(b.size(), 64u + 2 * 64 + 8);
  EXPECT_EQ(b, want);
  fmt::SglangPages back;
  ASSERT_TRUE(fmt::decode_sglang_pages(b.data(), b.size(), &back).ok());
  EXPECT_EQ(back.keys, (std::vector<fmt::SglangPageKey>{pk(0xaa), pk(0xbb)}));
  EXPECT_EQ(back.blocks, (std::vector<BlockHash>{bh(3), bh(4), bh(1), bh(2)}));

  std::string bad = b;
  bad[100] ^= 1;
  EXPECT_EQ(fmt::decode_sglang_pages(bad.data(), bad.size(), &back).code(), Code::kCorruption);
  bad = b;
  bad[8] = 2;  // a newer version
  EXPECT_EQ(fmt::decode_sglang_pages(bad.data(), bad.size(), &back).code(), Code::kNotSupported);
  EXPECT_EQ(fmt::decode_sglang_pages(b.data(), b.size() - 1, &back).code(), Code::kCorruption);
  // Unsorted entries (checksum made valid) are corrupt.
  bad = want;
  std::swap_ranges(bad.begin() + 64, bad.begin() + 128, bad.begin() + 128);
  const uint64_t s2 = fmt::xxh3(bad.data(), bad.size() - 8);
  for (int i = 0; i < 8; ++i) bad[bad.size() - 8 + i] = char(s2 >> (8 * i));
  EXPECT_EQ(fmt::decode_sglang_pages(bad.data(), bad.size(), &back).code(), Code::kCorruption);
  // Sizes that break §12.1.
  t.page_size = 24;
  EXPECT_EQ(fmt::encode_sglang_pages(t, &b).code(), Code::kInvalidArgument);
  t.page_size = 32;
  t.keys = {pk(1), pk(1)};
  EXPECT_EQ(fmt::encode_sglang_pages(t, &b).code(), Code::kInvalidArgument);
}

TEST(SglangPages, BuiltFromDocumentsAndLookedUpThroughTheCAbi) {
  const std::string p = tmpdir("build");
  NamespaceId ns{};
  NamespaceDesc d = test::test_ns("sgl-model", 2, 3, 8);
  std::vector<BlockHash> a, b, c;
  std::vector<uint32_t> ta = random_ids(16 * 9, 1), tb = ta, tc = random_ids(16 * 4, 3);
  for (size_t i = 16 * 4; i < tb.size(); ++i) tb[i] = (tb[i] + 7) % 49152;  // shares a's first 4 blocks
  {
    auto s = test::open_test_store(p, true, true);
    ASSERT_TRUE(s->register_namespace(d, &ns).ok());
    a = dump_chain(s.get(), ns, d, &ta);
    b = dump_chain(s.get(), ns, d, &tb);
    c = dump_chain(s.get(), ns, d, &tc, /*with_ids=*/false);  // tokens unknown: skipped
    add_doc(s.get(), ns, "a", a);
    add_doc(s.get(), ns, "b", b);
    add_doc(s.get(), ns, "c", c);
    SglangPagesBuildReport r;
    EXPECT_EQ(build_sglang_pages(s.get(), ns, 24, &r).code(), Code::kInvalidArgument);  // not a multiple of 16
    ASSERT_TRUE(build_sglang_pages(s.get(), ns, 32, &r).ok());
    EXPECT_EQ(r.documents, 3u);
    EXPECT_EQ(r.documents_used, 2u);
    EXPECT_EQ(r.documents_skipped, 1u);
    EXPECT_NE(r.first_skip.find("document c"), std::string::npos) << r.first_skip;
    // a: 4 full pages of 2 blocks (9 blocks); b: the same first 2 pages, then 2 of its own.
    EXPECT_EQ(r.pages, 6u);
    EXPECT_EQ(r.table_bytes, 64u + 6 * 64 + 8);
    EXPECT_EQ(r.chains, 0u);
    // A chain with ids and no document (a saving server's blocks): the next build lists its pages
    // too, and a's pages once (e shares a's first 3 blocks: one page of them, then its own).
    std::vector<uint32_t> te(ta.begin(), ta.begin() + 16 * 3), more = random_ids(16 * 3, 31);
    te.insert(te.end(), more.begin(), more.end());
    (void)dump_chain(s.get(), ns, d, &te);
    ASSERT_TRUE(build_sglang_pages(s.get(), ns, 32, &r).ok());
    EXPECT_EQ(r.documents_used, 2u);
    EXPECT_EQ(r.chains, 1u);
    EXPECT_EQ(r.chains_used, 1u);
    EXPECT_EQ(r.chains_skipped, 0u);
    EXPECT_EQ(r.pages, 6u + 2);  // e's 3 pages: the first is a's, the other two are new
  }
  // The keys SGLang computes for a's ids (page 32), and 4 more for ids never stored.
  std::vector<SglangPageHash> keys;
  sglang_page_hashes(std::nullopt, ta.data(), ta.size(), 32, &keys);
  ASSERT_EQ(keys.size(), 4u);
  std::vector<uint32_t> other = random_ids(64, 9);
  sglang_page_hashes(std::nullopt, other.data(), other.size(), 32, &keys);

  ucm_store_t* st = nullptr;
  ucm_store_open_params op = ucm_store_default_open_params();
  ASSERT_EQ(ucm_store_open(p.c_str(), &op, &st), UCM_OK) << ucm_last_error();
  ucm_sglang_pages_t* pages = nullptr;
  EXPECT_EQ(ucm_sglang_pages_open(st, ns.data(), 64, &pages), UCM_E_NOT_FOUND);  // no table for 64
  EXPECT_NE(std::string(ucm_last_error()).find("ucm sglang-pages"), std::string::npos) << ucm_last_error();
  ASSERT_EQ(ucm_sglang_pages_open(st, ns.data(), 32, &pages), UCM_OK) << ucm_last_error();
  uint32_t k = 0;
  uint64_t np = 0;
  ASSERT_EQ(ucm_sglang_pages_info(pages, &k, &np), UCM_OK);
  EXPECT_EQ(k, 2u);
  EXPECT_EQ(np, 8u);  // a's and b's 6, then the 2 of the chain without a document
  std::vector<uint8_t> blocks(keys.size() * 2 * 16, 0xee), present(keys.size(), 9);
  size_t prefix = 99;
  ASSERT_EQ(ucm_sglang_pages_lookup(pages, keys[0].data(), keys.size(), blocks.data(), present.data(), &prefix), UCM_OK);
  EXPECT_EQ(prefix, 4u);
  EXPECT_EQ(present, (std::vector<uint8_t>{1, 1, 1, 1, 0, 0}));
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(std::memcmp(blocks.data() + i * 16, a[i].data(), 16), 0) << i;
  EXPECT_EQ(blocks[4 * 32], 0xee);  // a page not listed: untouched
  close_and_remove(pages, st, p);
}

TEST(SglangPages, APageIsPresentOnlyWhenAllItsBlocksAre) {
  const std::string p = tmpdir("partial");
  NamespaceId ns{};
  NamespaceDesc d = test::test_ns("sgl-model", 2, 3, 8);
  std::vector<uint32_t> ta = random_ids(16 * 4, 5);
  std::vector<BlockHash> a;
  {
    auto s = test::open_test_store(p, true, true);
    ASSERT_TRUE(s->register_namespace(d, &ns).ok());
    a = dump_chain(s.get(), ns, d, &ta);
    // A hand-made table: page 0 = a's blocks 0, 1; page 1 = block 2 and a block never stored.
    fmt::SglangPages t;
    t.page_size = 32;
    t.block_size = 16;
    t.keys = {pk(1), pk(2)};
    t.blocks = {a[0], a[1], a[2], bh(0x5a)};
    std::string bytes;
    ASSERT_TRUE(fmt::encode_sglang_pages(t, &bytes).ok());
    ASSERT_TRUE(s->put_attachment(ns, fmt::sglang_pages_name(32), bytes.data(), bytes.size()).ok());
  }
  ucm_store_t* st = nullptr;
  ucm_store_open_params op = ucm_store_default_open_params();
  ASSERT_EQ(ucm_store_open(p.c_str(), &op, &st), UCM_OK) << ucm_last_error();
  ucm_sglang_pages_t* pages = nullptr;
  ASSERT_EQ(ucm_sglang_pages_open(st, ns.data(), 32, &pages), UCM_OK) << ucm_last_error();
  uint8_t keys[64];
  std::memset(keys, 1, 32);
  std::memset(keys + 32, 2, 32);
  uint8_t present[2] = {9, 9};
  size_t prefix = 9;
  ASSERT_EQ(ucm_sglang_pages_lookup(pages, keys, 2, nullptr, present, &prefix), UCM_OK);
  EXPECT_EQ(present[0], 1);
  EXPECT_EQ(present[1], 0);
  EXPECT_EQ(prefix, 1u);
  close_and_remove(pages, st, p);
}

// Strided paged loads: every (layer, K/V) page of a block lands in a host buffer laid out as
// SGLang's page_first ([tokens][layer][head][dim] per page) and page_head ([head][tokens][layer][dim]),
// for all heads and for a TP rank's head range; the element at each position is the payload's.
TEST(StridedLoads, PageFirstAndPageHeadLayoutsAndHeadRanges) {
  const std::string p = tmpdir("strided");
  NamespaceId ns{};
  NamespaceDesc d = test::test_ns("sgl-model", 3, 4, 8);  // L 3, H 4, D 8, T 16, bf16
  std::vector<uint32_t> ta = random_ids(16 * 2, 11);
  auto s = test::open_test_store(p, true, true);
  ASSERT_TRUE(s->register_namespace(d, &ns).ok());
  const std::vector<BlockHash> a = dump_chain(s.get(), ns, d, &ta);
  const size_t L = 3, H = 4, D = 8, T = 16, S = 2, P = 32;
  for (uint32_t h0 : {0u, 2u}) {
    const uint32_t h1 = h0 == 0 ? 4 : 3, nh = h1 - h0;
    for (int layout = 0; layout < 2; ++layout) {
      // One page of P = 2 blocks; K and V buffers of the page.
      std::vector<uint8_t> kbuf(P * L * nh * D * S, 0), vbuf(kbuf.size(), 0);
      std::vector<void*> ptrs;
      uint64_t ts, hs;
      auto at = [&](size_t t, size_t l, size_t h) {  // byte offset of (token t of the page, layer l, head h)
        return layout == 0 ? ((t * L + l) * nh + h) * D * S : ((h * P + t) * L + l) * D * S;
      };
      ts = layout == 0 ? L * nh * D * S : L * D * S;
      hs = layout == 0 ? D * S : P * L * D * S;
      for (size_t j = 0; j < 2; ++j)
        for (size_t l = 0; l < L; ++l)
          for (int kv = 0; kv < 2; ++kv) ptrs.push_back((kv ? vbuf : kbuf).data() + at(j * T, l, 0));
      LoadDest ld;
      ld.kind = LoadDest::Kind::kPaged;
      ld.heads = {h0, h1};
      ld.ptrs = ptrs;
      ld.token_stride = ts;
      ld.head_stride = hs;
      ASSERT_TRUE(s->load(ns, a.data(), 2, ld)->wait().ok());
      for (size_t j = 0; j < 2; ++j) {
        const auto pay = test::block_payload(a[j], d.payload_bytes());
        for (size_t l = 0; l < L; ++l)
          for (int kv = 0; kv < 2; ++kv)
            for (size_t t = 0; t < T; ++t)
              for (size_t h = 0; h < nh; ++h)
                ASSERT_EQ(std::memcmp((kv ? vbuf : kbuf).data() + at(j * T + t, l, h),
                                      pay.data() + ((((l * 2 + kv) * T + t) * H + h0 + h) * D) * S, D * S),
                          0)
                    << "layout " << layout << " heads " << h0 << " block " << j << " layer " << l << " kv " << kv
                    << " token " << t << " head " << h;
      }
    }
  }
  // Overlapping strides and strides on a contiguous destination are refused, touching nothing.
  std::vector<uint8_t> buf(1 << 16);
  LoadDest ld;
  ld.kind = LoadDest::Kind::kPaged;
  for (size_t i = 0; i < L * 2; ++i) ld.ptrs.push_back(buf.data());
  ld.token_stride = D * S;  // 4 heads in D * S bytes: overlap
  EXPECT_EQ(s->load(ns, a.data(), 1, ld)->wait().code(), Code::kInvalidArgument);
  ld.kind = LoadDest::Kind::kContiguous;
  ld.token_stride = 1 << 12;
  EXPECT_EQ(s->load(ns, a.data(), 1, ld)->wait().code(), Code::kInvalidArgument);
  s.reset();
  fs::remove_all(p);
}

// Strided dump sources: blocks taken from inside a page_first host layout ([tokens][layer][head][dim]
// per page), through the C++ API and the C ABI (kv NULL, params->kv_pages and strides), read back
// as packed payloads equal to the host elements; overlapping strides refused; a 0.7.0-sized params
// struct still accepted.
TEST(StridedDumps, BlocksFromAPageFirstHostLayout) {
  const size_t L = 3, H = 4, D = 8, T = 16, S = 2, P = 32;
  std::vector<uint8_t> host(2 * P * L * H * D * S);  // [kv][P][L][H][D]
  std::mt19937 rng(3);
  for (auto& b : host) b = uint8_t(rng());
  auto at = [&](size_t kv, size_t t, size_t l, size_t h) { return (((kv * P + t) * L + l) * H + h) * D * S; };
  std::vector<uint32_t> ta = random_ids(P, 21);
  NamespaceDesc d = test::test_ns("sgl-model", L, H, D);
  const BlockHash root = root_hash(d.id());
  std::vector<BlockHash> hs;
  hash_blocks(root, ta.data(), ta.size(), T, &hs);
  std::vector<const void*> pages;  // (block j, layer l, kv)
  for (size_t j = 0; j < 2; ++j)
    for (size_t l = 0; l < L; ++l)
      for (size_t kv = 0; kv < 2; ++kv) pages.push_back(host.data() + at(kv, j * T, l, 0));
  auto expect_payloads = [&](const std::string& p) {
    auto s = test::open_test_store(p, false);
    std::vector<uint8_t> got(2 * d.payload_bytes());
    LoadDest ld;
    ld.ptrs = {got.data(), got.data() + d.payload_bytes()};
    ASSERT_TRUE(s->load(d.id(), hs.data(), 2, ld)->wait().ok());
    for (size_t j = 0; j < 2; ++j)
      for (size_t l = 0; l < L; ++l)
        for (size_t kv = 0; kv < 2; ++kv)
          for (size_t t = 0; t < T; ++t)
            for (size_t h = 0; h < H; ++h)
              ASSERT_EQ(std::memcmp(got.data() + j * d.payload_bytes() + ((((l * 2 + kv) * T + t) * H + h) * D) * S,
                                    host.data() + at(kv, j * T + t, l, h), D * S),
                        0)
                  << p << " block " << j << " layer " << l << " kv " << kv << " token " << t << " head " << h;
  };
  // C++ API.
  const std::string p1 = tmpdir("sdump1");
  {
    auto s = test::open_test_store(p1, true, true);
    NamespaceId ns{};
    ASSERT_TRUE(s->register_namespace(d, &ns).ok());
    std::vector<DumpItem> items(2);
    for (size_t j = 0; j < 2; ++j) {
      items[j].hash = hs[j];
      items[j].parent = j ? hs[0] : root;
      items[j].token_count = T;
      items[j].kv_pages = pages.data() + j * L * 2;
      items[j].page_token_stride = L * H * D * S;
      items[j].tokens = ta.data() + j * T;
    }
    DumpItem bad = items[0];
    bad.page_token_stride = D * S;  // 4 heads of a token in one head's bytes
    EXPECT_EQ(s->dump(ns, &bad, 1)->wait().code(), Code::kInvalidArgument);
    ASSERT_TRUE(s->dump(ns, items.data(), 2)->wait().ok());
  }
  expect_payloads(p1);
  // The C ABI.
  const std::string p2 = tmpdir("sdump2");
  {
    auto s = test::open_test_store(p2, true, true);
    NamespaceId ns{};
    ASSERT_TRUE(s->register_namespace(d, &ns).ok());
  }
  ucm_store_t* st = nullptr;
  ucm_store_open_params op = ucm_store_default_open_params();
  op.mode = UCM_OPEN_READ_WRITE;
  ASSERT_EQ(ucm_store_open(p2.c_str(), &op, &st), UCM_OK) << ucm_last_error();
  std::vector<uint8_t> parents(32);
  std::memcpy(parents.data(), root.data(), 16);
  std::memcpy(parents.data() + 16, hs[0].data(), 16);
  ucm_store_dump_params dp = ucm_store_default_dump_params();
  dp.kv_pages = pages.data();
  dp.token_stride = L * H * D * S;
  ucm_task_t* task = nullptr;
  dp.head_stride = 1;  // below a head: refused at once, no task
  EXPECT_EQ(ucm_store_dump_ex(st, d.id().data(), hs[0].data(), parents.data(), 2, nullptr, &dp, &task), UCM_E_INVALID);
  EXPECT_EQ(task, nullptr);
  dp.head_stride = 0;
  // hashes [2][16] contiguous
  std::vector<uint8_t> hashes(32);
  std::memcpy(hashes.data(), hs[0].data(), 16);
  std::memcpy(hashes.data() + 16, hs[1].data(), 16);
  ASSERT_EQ(ucm_store_dump_ex(st, d.id().data(), hashes.data(), parents.data(), 2, nullptr, &dp, &task), UCM_OK)
      << ucm_last_error();
  EXPECT_EQ(ucm_task_wait(task, -1), UCM_OK) << ucm_last_error();
  ucm_task_free(task);
  // A caller built against 0.7.0 passes the smaller struct: accepted, kv required.
  ucm_store_dump_params old = ucm_store_default_dump_params();
  old.struct_size = offsetof(ucm_store_dump_params, kv_pages);
  EXPECT_EQ(ucm_store_dump_ex(st, d.id().data(), hashes.data(), parents.data(), 2, nullptr, &old, &task), UCM_E_INVALID);
  ucm_store_close(st);
  expect_payloads(p2);
  fs::remove_all(p1);
  fs::remove_all(p2);
}

// SGLang page namespaces (store_v1.md §12.2): the first one steps a version-4 store to 5 (index and
// superblock; min_reader_version 5, so ucm 0.7 refuses the store instead of calling it corrupt);
// a step killed between index and superblock is finished by the next writer; a version-2 store is
// refused with the upgrade command; bad descriptors are refused; page blocks are ordinary blocks.
namespace {
NamespaceDesc page_ns(const NamespaceDesc& base, uint32_t P, uint32_t h0, uint32_t h1) {
  NamespaceDesc d = base;
  d.block_size = P;
  d.num_kv_heads = h1 - h0;
  d.hash_scheme = NamespaceDesc::kSglangPageScheme;
  d.extra_json = "{\"sglang_pages\":{\"of\":\"" + to_hex(base.id()) + "\",\"page_size\":" + std::to_string(P) +
                 ",\"head_begin\":" + std::to_string(h0) + ",\"head_end\":" + std::to_string(h1) +
                 ",\"num_kv_heads\":" + std::to_string(base.num_kv_heads) + "}}";
  return d;
}
}  // namespace

TEST(PageNamespaces, TheFirstStepsTheStoreToFormat5) {
  const std::string p = tmpdir("pagens");
  NamespaceDesc base = test::test_ns("sgl-model", 2, 3, 8);
  {
    auto s = test::open_test_store(p, true, true);
    NamespaceId b{}, pg{};
    ASSERT_TRUE(s->register_namespace(base, &b).ok());
    fmt::Superblock sb;
    ASSERT_TRUE(fmt::read_superblock(p, &sb).ok());
    EXPECT_EQ(sb.format_version, 4u);  // a plain namespace: no step
    NamespaceDesc bad = page_ns(base, 32, 0, 3);
    bad.extra_json = "{}";
    EXPECT_EQ(s->register_namespace(bad, &pg).code(), Code::kInvalidArgument);
    bad = page_ns(base, 32, 0, 2);
    bad.num_kv_heads = 3;  // the range holds 2 heads
    EXPECT_EQ(s->register_namespace(bad, &pg).code(), Code::kInvalidArgument);
    bad = page_ns(base, 32, 0, 3);
    bad.block_size = 16;  // page_size 32
    EXPECT_EQ(s->register_namespace(bad, &pg).code(), Code::kInvalidArgument);
    ASSERT_TRUE(fmt::read_superblock(p, &sb).ok());
    EXPECT_EQ(sb.format_version, 4u);  // refused descriptors step nothing
    ASSERT_TRUE(s->register_namespace(page_ns(base, 32, 1, 2), &pg).ok());
    ASSERT_TRUE(fmt::read_superblock(p, &sb).ok());
    EXPECT_EQ(sb.format_version, 5u);
    EXPECT_EQ(sb.min_reader_version, 5u);
    // Page blocks: hash = a page key's first 16 bytes, parent = the page before, or the root.
    NamespaceDesc pd;
    ASSERT_TRUE(s->get_namespace(pg, &pd).ok());
    EXPECT_TRUE(pd.is_sglang_pages());
    std::vector<uint8_t> pay(pd.payload_bytes(), 0x42);
    std::vector<DumpItem> items(3);
    for (size_t i = 0; i < 3; ++i) {
      items[i].hash = bh(uint8_t(0x10 + i));
      items[i].parent = i ? bh(uint8_t(0x10 + i - 1)) : root_hash(pd.hash_seed());
      items[i].token_count = 32;
      items[i].kv = pay.data();
    }
    items[2].parent = bh(0x77);  // its page before was never written: an orphan for gc
    ASSERT_TRUE(s->dump(pg, items.data(), 3)->wait().ok());
  }
  {
    auto s = test::open_test_store(p, false);  // readers open a version-5 store
    ASSERT_TRUE(s);
    std::vector<BlockHash> hs = {bh(0x10), bh(0x11), bh(0x12)};
    NamespaceId pg{};
    NamespaceDesc pd;
    ASSERT_TRUE(s->find_namespace(to_hex(page_ns(base, 32, 1, 2).id()), &pd, &pg).ok());
    uint8_t present[3];
    size_t prefix = 0;
    ASSERT_TRUE(s->lookup(pg, hs.data(), 3, present, &prefix).ok());
    EXPECT_EQ(prefix, 3u);
  }
  // A step killed after the index, before the superblock: the next writer finishes it.
  fmt::Superblock sb;
  ASSERT_TRUE(fmt::read_superblock(p, &sb).ok());
  sb.format_version = 4;
  sb.min_reader_version = 4;
  ASSERT_TRUE(fmt::write_superblock(p, sb).ok());
  { auto s = test::open_test_store(p, true); }
  ASSERT_TRUE(fmt::read_superblock(p, &sb).ok());
  EXPECT_EQ(sb.format_version, 5u);
  EXPECT_EQ(sb.min_reader_version, 5u);
  fs::remove_all(p);
}

TEST(PageNamespaces, AVersion2StoreIsToldToUpgradeFirst) {
  const std::string p = tmpdir("pagens2");
  NamespaceDesc base = test::test_ns("sgl-model", 2, 3, 8);
  { test::open_test_store(p, true, true); }
  fmt::Superblock v2;  // a version-2 store as its writers see it: the superblock says 2
  ASSERT_TRUE(fmt::read_superblock(p, &v2).ok());
  v2.format_version = v2.min_reader_version = 2;
  ASSERT_TRUE(fmt::write_superblock(p, v2).ok());
  auto s = test::open_test_store(p, true);
  ASSERT_TRUE(s);
  NamespaceId pg{};
  Status st = s->register_namespace(page_ns(base, 32, 0, 3), &pg);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("--upgrade"), std::string::npos) << st.message();
  s.reset();
  fmt::Superblock sb;
  ASSERT_TRUE(fmt::read_superblock(p, &sb).ok());
  EXPECT_EQ(sb.format_version, 2u);
  fs::remove_all(p);
}
