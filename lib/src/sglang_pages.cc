// lib/src/sglang_pages.cc: SGLang page aliases (store_v1.md §12.1; ucm/sglang_pages.h): the
// table's builder (from the documents' stored token ids) and its in-memory reader.
#include "ucm/sglang_pages.h"

#include <cstring>
#include <optional>
#include <unordered_set>

#include "ucm/format/common.h"
#include "ucm/format/sglang_pages.h"
#include "ucm/hash.h"

namespace ucm {

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
  const uint32_t k = page_size / d.block_size;
  const BlockHash root = root_hash(d.hash_seed());
  fmt::SglangPages t;
  t.page_size = page_size;
  t.block_size = d.block_size;
  std::unordered_set<SglangPageHash, SglangPageHashHasher> seen;
  const auto docs = store->documents(ns);
  r.documents = docs.size();
  std::vector<uint32_t> tokens;
  std::vector<BlockHash> hashes;
  std::vector<SglangPageHash> keys;
  for (size_t di = 0; di < docs.size(); ++di) {
    const DocumentEntry& doc = docs[di];
    if (progress && di && di % 1000 == 0)
      progress("sglang pages: " + std::to_string(di) + "/" + std::to_string(docs.size()) + " documents, " +
               std::to_string(t.keys.size()) + " pages");
    s = store->chain_tokens(ns, doc.last_block, &tokens);
    hashes.clear();
    if (s.ok()) {
      hash_blocks(root, tokens.data(), tokens.size(), d.block_size, &hashes);
      if (hashes.empty() || hashes.back() != doc.last_block)
        s = Status::Corruption("document " + doc.id + ": its stored ids do not hash to its last block " +
                               to_hex(doc.last_block));
    }
    if (!s.ok()) {
      if (s.code() == Code::kIOError) return s;
      ++r.documents_skipped;
      if (r.first_skip.empty()) r.first_skip = "document " + doc.id + ": " + s.message();
      continue;
    }
    keys.clear();
    sglang_page_hashes(std::nullopt, tokens.data(), tokens.size(), page_size, &keys);
    if (!keys.empty()) ++r.documents_used;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!seen.insert(keys[i]).second) continue;  // a shared prefix: the same blocks
      t.keys.push_back(keys[i]);
      t.blocks.insert(t.blocks.end(), hashes.begin() + i * k, hashes.begin() + (i + 1) * k);
    }
  }
  std::string bytes;
  s = fmt::encode_sglang_pages(t, &bytes);
  if (s.ok()) s = store->put_attachment(ns, fmt::sglang_pages_name(page_size), bytes.data(), bytes.size());
  if (!s.ok()) return s;
  r.pages = t.keys.size();
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
