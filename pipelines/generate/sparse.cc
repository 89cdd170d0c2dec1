// pipelines/generate/sparse.cc: see sparse.h.
#include "sparse.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ucm::generate {

int policy_of(const std::string& name) {
  if (name == "esa") return UCM_POLICY_ESA;
  if (name == "quest") return UCM_POLICY_QUEST;
  if (name == "gsa") return UCM_POLICY_GSA;
  if (name == "psa") return UCM_POLICY_PSA;
  return -1;
}

RequestReprs::RequestReprs(const ucm_repr_info& info, std::vector<float> projection, size_t n_blocks)
    : info_(info), proj_(std::move(projection)), n_(n_blocks) {
  const size_t L = info.num_layers, H = info.num_kv_heads, D = info.head_dim, T = info.block_size;
  const size_t C = std::max<size_t>(1, n_blocks);
  r0_.assign(L * H * C * D, 0.f);
  r1_.assign(L * H * C * 2 * D, 0.f);
  r4_.assign(info.hash_bits ? L * H * C * T * (info.hash_bits / 8) : 0, 0);
  buf_.struct_size = sizeof(buf_);
  buf_.head_begin = 0;
  buf_.head_end = uint32_t(H);
  buf_.dtype = UCM_DTYPE_F32;
  buf_.capacity = C;
  buf_.r0 = r0_.data();
  buf_.r1 = r1_.data();
  buf_.r4 = r4_.empty() ? nullptr : r4_.data();
}

void RequestReprs::compute_block(size_t i, const KvCache& cache) {
  const size_t L = info_.num_layers, H = info_.num_kv_heads, D = info_.head_dim, T = info_.block_size;
  const size_t C = buf_.capacity, B = info_.hash_bits, NB = B / 8;
  for (size_t l = 0; l < L; ++l) {
    auto k = cache.k[l].narrow(0, int64_t(i * T), int64_t(T)).to(torch::kFloat).contiguous();  // [T, H, D]
    const float* kp = k.data_ptr<float>();
    for (size_t h = 0; h < H; ++h) {
      float* r0 = &r0_[((l * H + h) * C + i) * D];
      float* r1 = &r1_[((l * H + h) * C + i) * 2 * D];
      for (size_t d = 0; d < D; ++d) {
        double sum = 0;
        float mn = INFINITY, mx = -INFINITY;
        for (size_t t = 0; t < T; ++t) {
          const float x = kp[(t * H + h) * D + d];
          sum += x;
          mn = std::min(mn, x);
          mx = std::max(mx, x);
        }
        r0[d] = float(sum / double(T));
        r1[d] = mn;
        r1[D + d] = mx;
      }
      if (B == 0 || proj_.empty()) continue;
      const float* P = &proj_[(l * H + h) * D * B];  // [D][B]
      uint8_t* r4 = &r4_[((l * H + h) * C + i) * T * NB];
      for (size_t t = 0; t < T; ++t) {
        std::memset(r4 + t * NB, 0, NB);
        for (size_t j = 0; j < B; ++j) {
          double dot = 0;
          for (size_t d = 0; d < D; ++d) dot += double(kp[(t * H + h) * D + d]) * P[d * B + j];
          if (dot >= 0) r4[t * NB + j / 8] |= uint8_t(1u << (j % 8));
        }
      }
    }
  }
}

Status RequestReprs::fill(const StoreClient& store, const std::vector<Hash16>& hashes, size_t n_stored,
                          const KvCache& cache) {
  std::vector<int> st(n_, UCM_E_NOT_FOUND);
  n_stored = std::min(n_stored, n_);
  if (n_stored > 0) {
    std::vector<int> loaded_st;
    UCM_RETURN_IF_ERROR(store.load_repr(hashes, n_stored, &buf_, &loaded_st));
    std::copy(loaded_st.begin(), loaded_st.end(), st.begin());
  }
  for (size_t i = 0; i < n_; ++i) {
    if (i < n_stored && st[i] == UCM_OK) {
      ++loaded;
      continue;
    }
    if (i < n_stored) {
      ++failed;
      spdlog::warn("representations of block {} failed to load ({}): computed from the KV cache", i,
                   ucm_code_name(st[i]));
    }
    compute_block(i, cache);
    ++computed;
  }
  return Status::OK();
}

model::LlamaModel::KeyMaskFn sparse_mask(ucm_retriever_t* retriever, const RequestReprs& reprs, uint32_t block_size,
                                         uint32_t num_q_heads, double* selected_sum, uint64_t* selected_count) {
  return [=, &reprs](int64_t layer, const torch::Tensor& q, int64_t n_keys) -> torch::Tensor {
    const auto& info = reprs.info();
    const size_t n = reprs.n_blocks();
    if (n == 0 || q.size(0) != 1) return {};  // sparse attention is for decode steps
    if (layer < 64 && ((info.dense_layers >> layer) & 1)) return {};
    const uint32_t H = info.num_kv_heads;
    auto qc = q.reshape({int64_t(num_q_heads), int64_t(info.head_dim)}).contiguous();
    ucm_retrieval_query rq{};
    rq.struct_size = sizeof(rq);
    rq.layer = uint32_t(layer);
    rq.q = qc.data_ptr<float>();
    rq.q_dtype = UCM_DTYPE_F32;
    rq.n_q_heads = num_q_heads;
    rq.group_size = num_q_heads / H;
    rq.reprs = &reprs.buffers();
    rq.n_blocks = n;
    std::vector<uint32_t> idx(size_t(H) * n), counts(H);
    uint32_t sets = 0;
    if (ucm_retriever_select(retriever, &rq, idx.data(), n, counts.data(), &sets) != UCM_OK) {
      spdlog::warn("ucm_retriever_select failed ({}): layer {} dense for this step", ucm_last_error(), layer);
      return {};
    }
    // Keys of the context blocks are kept only where selected; later keys (the partial last
    // block of the prompt and the generated tokens) always are.
    auto keep = torch::ones({int64_t(H), n_keys}, torch::kBool);
    auto* kp = keep.data_ptr<bool>();
    for (uint32_t h = 0; h < H; ++h) {
      bool* row = kp + size_t(h) * size_t(n_keys);
      std::fill(row, row + n * block_size, false);
      const uint32_t s = sets == 1 ? 0 : h;
      for (uint32_t j = 0; j < counts[s]; ++j) {
        const size_t b = idx[size_t(s) * n + j];
        std::fill(row + b * block_size, row + (b + 1) * block_size, true);
      }
      *selected_sum += double(counts[s]) / double(n);
      ++*selected_count;
    }
    return keep;
  };
}

namespace {

KvCache clone_cache(const KvCache& c) {
  KvCache o;
  o.dtype = c.dtype;
  o.len = c.len;
  for (const auto& t : c.k) o.k.push_back(t.clone());
  for (const auto& t : c.v) o.v.push_back(t.clone());
  return o;
}

}  // namespace

Status run_sparse(const Engine& eng, const StoreClient& store, const SparseOptions& o,
                  const std::vector<int32_t>& ids, int64_t capacity, uint32_t n_new, SparseReport* out) {
  *out = SparseReport{};
  out->policy = o.policy;
  ucm_retriever_params rp = ucm_retriever_default_params();
  if (!o.retrieval_config.empty())
    UCM_RETURN_IF_ERROR(from_code(ucm_retriever_params_load(o.retrieval_config.c_str(), &rp), "retrieval config"));
  rp.policy = policy_of(o.policy);
  if (rp.policy < 0) return Status::InvalidArgument("--sparse: unknown policy '" + o.policy + "' (esa, quest, gsa, psa)");
  if (!store.found()) return Status::InvalidArgument("--sparse: the store has no namespace for this model");
  ucm_repr_info info;
  UCM_RETURN_IF_ERROR(store.repr_info(&info));
  std::vector<float> proj;
  UCM_RETURN_IF_ERROR(store.r4_projection(info, &proj));
  const uint32_t T = eng.block_size();
  const auto& mc = eng.model().config();
  // One dense prefill of the prompt; each sparse run decodes from a copy of it.
  Prefill base;
  UCM_RETURN_IF_ERROR(eng.prefill_recompute(ids, capacity, &base));
  std::vector<Hash16> hashes;
  UCM_RETURN_IF_ERROR(store.hash_blocks(ids, T, &hashes));
  size_t hit = 0;
  UCM_RETURN_IF_ERROR(store.prefix_blocks(hashes, &hit));
  RequestReprs reprs(info, proj, hashes.size());
  UCM_RETURN_IF_ERROR(reprs.fill(store, hashes, hit, base.cache));
  out->context_blocks = hashes.size();
  out->repr_blocks_loaded = reprs.loaded;
  out->repr_blocks_computed = reprs.computed;
  out->repr_blocks_failed = reprs.failed;

  ucm_retriever_t* ret = nullptr;
  UCM_RETURN_IF_ERROR(from_code(ucm_retriever_create(&rp, &info, proj.empty() ? nullptr : proj.data(), &ret),
                                "ucm_retriever_create"));
  std::unique_ptr<ucm_retriever_t, void (*)(ucm_retriever_t*)> guard(ret, ucm_retriever_free);
  double sel_sum = 0;
  uint64_t sel_n = 0;
  auto mask = sparse_mask(ret, reprs, T, uint32_t(mc.num_attention_heads), &sel_sum, &sel_n);

  // The dense reference decodes from the same prefill as the sparse runs, so that the comparison
  // measures sparsity alone (the caller's decode may come from the cached prefix, whose logits
  // differ from a full prefill's in the last bits, docs/generate.md).
  Decode dense;
  {
    Prefill d{base};
    d.cache = clone_cache(base.cache);
    eng.decode(&d, n_new, -1, nullptr, {}, true, &dense);
  }
  // Teacher-forced: each step is fed the dense token; compare the next-token distributions.
  Prefill tf{base};
  tf.cache = clone_cache(base.cache);
  Decode st;
  eng.decode(&tf, uint32_t(dense.tokens.size()), -1, &dense.tokens, mask, true, &st);
  const Agreement ag = compare_decodes(dense, st, 1);  // step 0 is the shared dense prefill's
  out->steps = ag.steps;
  out->top1_agreement = ag.top1_agreement;
  out->mean_kl = ag.mean_kl;
  // Free-running greedy sparse decode.
  ucm_retriever_reset(ret);
  Prefill fr{base};
  fr.cache = clone_cache(base.cache);
  Decode free_run;
  eng.decode(&fr, uint32_t(dense.tokens.size()), -1, nullptr, mask, false, &free_run);
  out->tokens = free_run.tokens;
  out->greedy_match = greedy_match(out->tokens, dense.tokens);
  out->mean_selected_fraction = sel_n ? sel_sum / double(sel_n) : 0;
  return Status::OK();
}

}  // namespace ucm::generate
