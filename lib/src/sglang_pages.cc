// lib/src/sglang_pages.cc: SGLang page aliases (store_v1.md §12.1; ucm/sglang_pages.h): the
// table's builder (from the stored token ids of the documents' chains, then of every other chain)
// and its in-memory reader.
#include "ucm/sglang_pages.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <unordered_set>

#include "ucm/format/common.h"
#include "ucm/format/sglang_pages.h"
#include "ucm/hash.h"

namespace ucm {

namespace {

struct BlockHashHasher {  // block hashes are MD5 digests: any 8 bytes spread well
  size_t operator()(const BlockHash& h) const noexcept {
    size_t v;
    std::memcpy(&v, h.data(), sizeof v);
    return v;
  }
};

// The table being built: each distinct page key once, with its k blocks.
struct PageTableBuild {
  fmt::SglangPages t;
  std::unordered_set<SglangPageHash, SglangPageHashHasher> seen;
  std::vector<uint32_t> tokens;
  std::vector<BlockHash> hashes;
  std::vector<SglangPageHash> keys;
};

// Adds the full pages of the chain ending at `last` (its stored ids, from the chain's start);
// sets *pages to how many it gave. Errors as Store::chain_tokens, and Corruption when the ids do
// not hash to `last`.
Status add_chain(Store* store, const NamespaceId& ns, const NamespaceDesc& d, const BlockHash& last,
                 PageTableBuild* b, size_t* pages) {
  *pages = 0;
  Status s = store->chain_tokens(ns, last, &b->tokens);
  if (!s.ok()) return s;
  b->hashes.clear();
  hash_blocks(root_hash(d.hash_seed()), b->tokens.data(), b->tokens.size(), d.block_size, &b->hashes);
  if (b->hashes.empty() || b->hashes.back() != last)
    return Status::Corruption("its stored ids do not hash to its last block " + to_hex(last));
  b->keys.clear();
  sglang_page_hashes(std::nullopt, b->tokens.data(), b->tokens.size(), b->t.page_size, &b->keys);
  const uint32_t k = b->t.page_size / d.block_size;
  *pages = b->keys.size();
  for (size_t i = 0; i < b->keys.size(); ++i) {
    if (!b->seen.insert(b->keys[i]).second) continue;  // a shared prefix: the same blocks
    b->t.keys.push_back(b->keys[i]);
    b->t.blocks.insert(b->t.blocks.end(), b->hashes.begin() + i * k, b->hashes.begin() + (i + 1) * k);
  }
  return Status::OK();
}

// The last blocks of the namespace's chains that hold ids and end at no document's last block
// (blocks servers saved): blocks with ids that are no block's parent.
Status other_chain_ends(Store* store, const NamespaceId& ns, const std::unordered_set<BlockHash, BlockHashHasher>& docs,
                        std::vector<BlockHash>* out) {
  std::unordered_set<BlockHash, BlockHashHasher> with_ids, parents;
  Status s = store->for_each_block(ns, [&](const BlockHash& h, const BlockInfo& info) {
    if (info.has_tokens) with_ids.insert(h);
    parents.insert(info.parent);
    return true;
  });
  if (!s.ok()) return s;
  for (const auto& h : with_ids)
    if (!parents.count(h) && !docs.count(h)) out->push_back(h);
  std::sort(out->begin(), out->end());  // a table that does not depend on hash-set order
  return Status::OK();
}

}  // namespace

Status build_sglang_pages(Store* store, const NamespaceId& ns, uint32_t page_size, SglangPagesBuildReport* report,
                          const std::function<void(const std::string&)>& progress) {
  SglangPagesBuildReport r;
  NamespaceDesc d;
  Status s = store->get_namespace(ns, &d);
  if (!s.ok()) return s;
  if (store->read_only()) return Status::InvalidArgument("sglang pages: the store is open read-only (a writer builds the table)");
  if (page_size == 0 || page_size % d.block_size)
    return Status::InvalidArgument("sglang pages: page size " + std::to_string(page_size) +
                                   " is not a multiple of the block size " + std::to_string(d.block_size) +
                                   " of namespace " + d.display_name());
  r.page_size = page_size;
  r.block_size = d.block_size;
  PageTableBuild b;
  b.t.page_size = page_size;
  b.t.block_size = d.block_size;
  const auto docs = store->documents(ns);
  r.documents = docs.size();
  std::unordered_set<BlockHash, BlockHashHasher> doc_ends;
  for (size_t di = 0; di < docs.size(); ++di) {
    const DocumentEntry& doc = docs[di];
    doc_ends.insert(doc.last_block);
    if (progress && di && di % 1000 == 0)
      progress("sglang pages: " + std::to_string(di) + "/" + std::to_string(docs.size()) + " documents, " +
               std::to_string(b.t.keys.size()) + " pages");
    size_t pages = 0;
    s = add_chain(store, ns, d, doc.last_block, &b, &pages);
    if (s.code() == Code::kIOError) return s;
    if (!s.ok()) {
      ++r.documents_skipped;
      if (r.first_skip.empty()) r.first_skip = "document " + doc.id + ": " + s.message();
      continue;
    }
    if (pages) ++r.documents_used;
  }
  // Then every other chain whose blocks hold ids (a saving server's), so pages of prompts vLLM
  // saved are served to SGLang too.
  std::vector<BlockHash> ends;
  s = other_chain_ends(store, ns, doc_ends, &ends);
  if (!s.ok()) return s;
  r.chains = ends.size();
  for (const BlockHash& last : ends) {
    size_t pages = 0;
    s = add_chain(store, ns, d, last, &b, &pages);
    if (s.code() == Code::kIOError) return s;
    if (!s.ok()) {
      ++r.chains_skipped;  // a block on the way without ids, or gone meanwhile
      continue;
    }
    if (pages) ++r.chains_used;
  }
  std::string bytes;
  s = fmt::encode_sglang_pages(b.t, &bytes);
  if (s.ok()) s = store->put_attachment(ns, fmt::sglang_pages_name(page_size), bytes.data(), bytes.size());
  if (!s.ok()) return s;
  r.pages = b.t.keys.size();
  r.table_bytes = bytes.size();
  if (report) *report = r;
  return Status::OK();
}

Status SglangPageIndex::Open(Store* store, const NamespaceId& ns, uint32_t page_size,
                             std::unique_ptr<SglangPageIndex>* out) {
  std::unique_ptr<SglangPageIndex> x(new SglangPageIndex());
  x->store_ = store;
  x->ns_ = ns;
  x->page_size_ = page_size;
  std::lock_guard<std::mutex> g(x->mu_);
  Status s = x->load_locked();
  if (!s.ok()) return s;
  *out = std::move(x);
  return Status::OK();
}

Status SglangPageIndex::load_locked() {
  loaded_ = std::chrono::steady_clock::now();
  NamespaceDesc d;
  Status s = store_->get_namespace(ns_, &d);
  if (!s.ok()) return s;
  std::string bytes;
  s = store_->get_attachment(ns_, fmt::sglang_pages_name(page_size_), &bytes);
  if (s.code() == Code::kNotFound)
    return Status::NotFound("namespace " + d.display_name() + " has no SGLang page table for page size " +
                            std::to_string(page_size_) + " (build it: ucm sglang-pages STORE --page-size " +
                            std::to_string(page_size_) + ")");
  if (!s.ok()) return s;
  if (bytes.size() >= 8) {
    const uint64_t sum = fmt::get_le64(reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size() - 8);
    if (sum == checksum_ && !index_.empty()) return Status::OK();  // unchanged
  }
  fmt::SglangPages t;
  s = fmt::decode_sglang_pages(bytes.data(), bytes.size(), &t);
  if (!s.ok()) return s;
  if (t.block_size != d.block_size || t.page_size != page_size_)
    return Status::Corruption("SGLang page table of " + d.display_name() + " says page " + std::to_string(t.page_size) +
                              " / block " + std::to_string(t.block_size) + ", the namespace's block size is " +
                              std::to_string(d.block_size));
  std::unordered_map<SglangPageHash, uint32_t, SglangPageHashHasher> idx(t.keys.size() * 2 + 1);
  for (size_t i = 0; i < t.keys.size(); ++i) idx.emplace(t.keys[i], uint32_t(i));
  index_ = std::move(idx);
  blocks_ = std::move(t.blocks);
  k_ = t.blocks_per_page();
  checksum_ = fmt::get_le64(reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size() - 8);
  return Status::OK();
}

size_t SglangPageIndex::pages() const {
  std::lock_guard<std::mutex> g(mu_);
  return index_.size();
}

void SglangPageIndex::resolve(const SglangPageHash* keys, size_t n, BlockHash* blocks, uint8_t* found) const {
  std::lock_guard<std::mutex> g(mu_);
  for (size_t i = 0; i < n; ++i) {
    auto it = index_.find(keys[i]);
    found[i] = it != index_.end();
    if (it != index_.end() && blocks)
      std::memcpy(blocks + i * k_, blocks_.data() + size_t(it->second) * k_, k_ * sizeof(BlockHash));
  }
}

Status SglangPageIndex::maybe_reload(std::chrono::milliseconds min_interval) {
  std::lock_guard<std::mutex> g(mu_);
  if (std::chrono::steady_clock::now() - loaded_ < min_interval) return Status::OK();
  return load_locked();
}

}  // namespace ucm
