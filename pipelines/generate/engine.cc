// pipelines/generate/engine.cc: see engine.h.
#include "engine.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "generate_internal.h"

namespace ucm::generate {
namespace {

using Clock = std::chrono::steady_clock;
using detail::ms_since;

}  // namespace

std::vector<void*> page_ptrs(const KvCache& cache, size_t n_blocks, uint32_t block_size) {
  const size_t L = cache.k.size();
  const size_t page = size_t(block_size) * size_t(cache.k[0].size(1) * cache.k[0].size(2)) * cache.k[0].element_size();
  std::vector<void*> ptrs(n_blocks * L * 2);
  for (size_t i = 0; i < n_blocks; ++i)
    for (size_t l = 0; l < L; ++l) {
      ptrs[(i * L + l) * 2 + 0] = static_cast<char*>(cache.k[l].data_ptr()) + i * page;
      ptrs[(i * L + l) * 2 + 1] = static_cast<char*>(cache.v[l].data_ptr()) + i * page;
    }
  return ptrs;
}

Agreement compare_decodes(const Decode& ref, const Decode& test, size_t from) {
  Agreement a;
  uint64_t agree = 0;
  double kl = 0;
  for (size_t i = from; i < test.logits.size() && i < ref.logits.size(); ++i) {
    agree += test.tokens[i] == ref.tokens[i];
    auto lp = torch::log_softmax(ref.logits[i].to(torch::kDouble), -1);
    auto lq = torch::log_softmax(test.logits[i].to(torch::kDouble), -1);
    kl += (lp.exp() * (lp - lq)).sum().item<double>();
    ++a.steps;
  }
  if (a.steps) {
    a.top1_agreement = double(agree) / double(a.steps);
    a.mean_kl = kl / double(a.steps);
  }
  return a;
}

uint64_t greedy_match(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  uint64_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

torch::Tensor to_tensor(const std::vector<int32_t>& ids, size_t begin, size_t end) {
  auto t = torch::empty({int64_t(end - begin)}, torch::kInt64);
  auto* p = t.data_ptr<int64_t>();
  for (size_t i = begin; i < end; ++i) p[i - begin] = ids[i];
  return t;
}

Status Engine::prefill_recompute(const std::vector<int32_t>& ids, int64_t capacity, Prefill* out) const {
  if (ids.empty()) return Status::InvalidArgument("the prompt has no tokens");
  *out = Prefill{};
  out->cache = m_.make_cache(capacity, dtype_);
  auto t0 = Clock::now();
  out->logits = m_.extend(to_tensor(ids, 0, ids.size()), &out->cache)[0];
  (void)out->logits.argmax().item<int64_t>();  // the first token is chosen: TTFT ends here
  out->prefill_ms = out->ttft_ms = ms_since(t0);
  return Status::OK();
}

Status Engine::prefill_cached(const std::vector<int32_t>& ids, int64_t capacity, Prefill* out) const {
  if (ids.empty()) return Status::InvalidArgument("the prompt has no tokens");
  if (!store_) return Status::InvalidArgument("no store to read the cached prefix from");
  *out = Prefill{};
  out->cache = m_.make_cache(capacity, dtype_);
  auto t0 = Clock::now();
  UCM_RETURN_IF_ERROR(store_->hash_blocks(ids, bs_, &out->hashes));
  size_t hit = 0;
  UCM_RETURN_IF_ERROR(store_->prefix_blocks(out->hashes, &hit));
  out->hit_blocks = hit;
  // At least the last prompt token is computed: its logits give the first new token.
  const size_t want = std::min<size_t>(hit, (ids.size() - 1) / bs_);
  if (want > 0) {
    auto tl = Clock::now();
    std::vector<int> st;
    UCM_RETURN_IF_ERROR(store_->load_paged(out->hashes, want, page_ptrs(out->cache, want, bs_), &st));
    size_t used = 0;
    while (used < want && st[used] == UCM_OK) ++used;
    for (int code : st) out->failed_blocks += code != UCM_OK;
    if (used < want)
      spdlog::warn("block {} of the cached prefix failed to load ({}): it and the {} blocks after it are recomputed",
                   used, ucm_code_name(st[used]), want - used - 1);
    out->used_blocks = used;
    out->load_ms = ms_since(tl);
  }
  out->cache.len = int64_t(out->used_blocks) * bs_;
  auto tp = Clock::now();
  out->logits = m_.extend(to_tensor(ids, size_t(out->cache.len), ids.size()), &out->cache)[0];
  (void)out->logits.argmax().item<int64_t>();
  out->prefill_ms = ms_since(tp);
  out->ttft_ms = ms_since(t0);
  return Status::OK();
}

void Engine::decode(Prefill* p, uint32_t n, int64_t eos, const std::vector<int32_t>* teacher,
                    const model::LlamaModel::KeyMaskFn& mask, bool keep_logits, Decode* out) const {
  *out = Decode{};
  torch::Tensor logits = p->logits;
  auto t0 = Clock::now();
  for (uint32_t i = 0; i < n; ++i) {
    const int32_t best = int32_t(logits.argmax().item<int64_t>());
    out->tokens.push_back(best);
    if (keep_logits) out->logits.push_back(logits);
    const int32_t fed = teacher ? (*teacher)[i] : best;
    if (!teacher && eos >= 0 && fed == eos) break;
    if (i + 1 == n || (teacher && i + 1 >= teacher->size())) break;
    if (i == 0) t0 = Clock::now();
    logits = m_.extend(to_tensor({fed}, 0, 1), &p->cache, false, mask)[0];
  }
  if (out->tokens.size() > 1) out->decode_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
}

Status Engine::save(const std::vector<int32_t>& tokens, const KvCache& cache, uint64_t* saved) const {
  *saved = 0;
  if (!store_) return Status::InvalidArgument("no store to save to");
  const size_t n_tok = std::min<size_t>(tokens.size(), size_t(cache.len));
  std::vector<int32_t> ids(tokens.begin(), tokens.begin() + std::ptrdiff_t(n_tok));
  std::vector<Hash16> hashes;
  UCM_RETURN_IF_ERROR(store_->hash_blocks(ids, bs_, &hashes));
  if (hashes.empty()) return Status::OK();
  std::vector<uint8_t> present;
  size_t prefix = 0;
  UCM_RETURN_IF_ERROR(store_->lookup(hashes, &present, &prefix));
  Hash16 root{};
  UCM_RETURN_IF_ERROR(from_code(ucm_hash_root(store_->hash_seed().data(), root.data()), "ucm_hash_root"));
  // Payload of block i: [L][2][T][H][D] in the cache dtype, gathered from the cache pages.
  const auto& c = m_.config();
  const int64_t L = c.num_hidden_layers;
  std::vector<Hash16> h, parents;
  std::vector<torch::Tensor> bufs;
  std::vector<const void*> kv;
  std::vector<uint32_t> toks;  // the saved blocks' ids (store_v1.md §3.2)
  for (size_t i = 0; i < hashes.size(); ++i) {
    if (present[i]) continue;
    toks.insert(toks.end(), ids.begin() + std::ptrdiff_t(i * bs_), ids.begin() + std::ptrdiff_t((i + 1) * bs_));
    std::vector<torch::Tensor> parts;
    for (int64_t l = 0; l < L; ++l) {
      parts.push_back(cache.k[size_t(l)].narrow(0, int64_t(i) * bs_, bs_));
      parts.push_back(cache.v[size_t(l)].narrow(0, int64_t(i) * bs_, bs_));
    }
    bufs.push_back(torch::stack(parts).contiguous());  // [L*2, T, H, D]
    kv.push_back(bufs.back().data_ptr());
    h.push_back(hashes[i]);
    parents.push_back(i == 0 ? root : hashes[i - 1]);
  }
  UCM_RETURN_IF_ERROR(store_->dump(h, parents, kv, toks));
  *saved = h.size();
  return Status::OK();
}

}  // namespace ucm::generate
