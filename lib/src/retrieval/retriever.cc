// lib/src/retrieval/retriever.cc: policies, GQA reduction, shared heads, dense layers and reuse
// (see retriever.h).
#include "ucm/core/retrieval/retriever.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "ucm/core/c_struct.h"
#include "ucm/half.h"
#include "ucm/core/retrieval/kernels.h"
#include "ucm/core/retrieval/params.h"

namespace ucm::retrieval {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr uint32_t kMaxHeadDim = 1024;   // kernels convert a [2][D] row on the stack
constexpr uint32_t kMaxHashBits = 4096;

Status bad(const std::string& m) { return Status::InvalidArgument(m); }

}  // namespace

Status Retriever::Create(const ucm_retriever_params& params, const ucm_repr_info& info, const float* projection,
                         std::unique_ptr<Retriever>* out) {
  UCM_RETURN_IF_ERROR(validate_params(params));
  UCM_RETURN_IF_ERROR(capi::check_struct_size<ucm_repr_info>("info", info.struct_size));
  if (info.num_layers == 0 || info.num_kv_heads == 0 || info.head_dim == 0 || info.block_size == 0)
    return bad("info: num_layers, num_kv_heads, head_dim and block_size must be positive");
  if (info.head_dim > kMaxHeadDim) return bad("info.head_dim " + std::to_string(info.head_dim) + " exceeds 1024");
  if (info.hash_bits % 8 != 0 || info.hash_bits > kMaxHashBits)
    return bad("info.hash_bits " + std::to_string(info.hash_bits) + " is not a multiple of 8 in [0, 4096]");
  if (elem_size(info.dtype) == 0) return bad("info.dtype " + std::to_string(info.dtype) + " is not a UCM_DTYPE_*");
  if (params.policy == UCM_POLICY_GSA) {
    if (!(info.sections & UCM_REPR_R4) || info.hash_bits == 0)
      return bad("UCM_POLICY_GSA needs R4 sign hashes, and the namespace has none (info.sections / hash_bits)");
    if (!projection) return bad("UCM_POLICY_GSA needs the r4_projection attachment (projection is NULL)");
  }
  std::unique_ptr<Retriever> r(new Retriever(params, info));
  if (params.policy == UCM_POLICY_GSA) {
    const size_t np = size_t{info.num_layers} * info.num_kv_heads * info.head_dim * info.hash_bits;
    r->proj_.assign(projection, projection + np);
  }
  r->state_.resize(info.num_layers);
  *out = std::move(r);
  return Status::OK();
}

void Retriever::reset() {
  for (auto& s : state_) s = LayerState{};
}

Status Retriever::resolve(const ucm_retrieval_query& q, Resolved* r) const {
  UCM_RETURN_IF_ERROR(capi::check_struct_size<ucm_retrieval_query>("query", q.struct_size));
  if (q.layer >= info_.num_layers)
    return bad("query.layer " + std::to_string(q.layer) + " >= num_layers " + std::to_string(info_.num_layers));
  if (!q.q) return bad("query.q is NULL");
  if (q.q_dtype != UCM_DTYPE_F32 && q.q_dtype != UCM_DTYPE_BF16)
    return bad("query.q_dtype " + std::to_string(q.q_dtype) + " is neither UCM_DTYPE_F32 nor UCM_DTYPE_BF16");
  if (q.group_size == 0) return bad("query.group_size is 0");
  const ucm_repr_buffers* b = q.reprs;
  if (!b) return bad("query.reprs is NULL");
  UCM_RETURN_IF_ERROR(capi::check_struct_size<ucm_repr_buffers>("reprs", b->struct_size));
  const uint32_t H = info_.num_kv_heads;
  const uint32_t h0 = b->head_begin, h1 = (b->head_begin == 0 && b->head_end == 0) ? H : b->head_end;
  if (h0 >= h1 || h1 > H)
    return bad("reprs head range [" + std::to_string(b->head_begin) + ", " + std::to_string(b->head_end) +
               ") is not within [0, " + std::to_string(H) + ")");
  if (uint64_t{q.n_q_heads} != uint64_t{q.group_size} * (h1 - h0))
    return bad("query.n_q_heads " + std::to_string(q.n_q_heads) + " != group_size " + std::to_string(q.group_size) +
               " x the " + std::to_string(h1 - h0) + " KV heads of the buffers' head range");
  if (q.n_blocks > b->capacity)
    return bad("query.n_blocks " + std::to_string(q.n_blocks) + " exceeds reprs->capacity " + std::to_string(b->capacity));
  if (elem_size(b->dtype) == 0) return bad("reprs->dtype " + std::to_string(b->dtype) + " is not a UCM_DTYPE_*");
  const bool dense = p_.honor_dense_layers && q.layer < 64 && ((info_.dense_layers >> q.layer) & 1u);
  if (!dense && q.n_blocks > 0) {
    const int pol = p_.policy;
    if (pol == UCM_POLICY_ESA && !b->r0) return bad("UCM_POLICY_ESA needs reprs->r0 (R0), which is NULL");
    if ((pol == UCM_POLICY_QUEST || pol == UCM_POLICY_PSA) && !b->r1)
      return bad(std::string("UCM_POLICY_") + (pol == UCM_POLICY_PSA ? "PSA" : "QUEST") +
                 " needs reprs->r1 (R1), which is NULL");
    if (pol == UCM_POLICY_GSA && !b->r4) return bad("UCM_POLICY_GSA needs reprs->r4 (R4), which is NULL");
  }
  r->layer = q.layer;
  r->h0 = h0;
  r->Hs = h1 - h0;
  r->G = q.group_size;
  r->n = q.n_blocks;
  r->C = b->capacity;
  r->valid = q.valid;
  r->top_k = q.top_k;
  r->b = b;
  return Status::OK();
}

void Retriever::load_queries(const ucm_retrieval_query& q, const Resolved& r) {
  const size_t m = size_t{r.Hs} * r.G * info_.head_dim;
  qf_.resize(m);
  if (q.q_dtype == UCM_DTYPE_F32) {
    std::memcpy(qf_.data(), q.q, m * sizeof(float));
  } else {
    const auto* s = static_cast<const uint16_t*>(q.q);
    for (size_t i = 0; i < m; ++i) qf_[i] = bf16_to_f32(s[i]);
  }
}

void Retriever::head_scores(const Resolved& r, uint32_t hh, float* out) {
  const uint32_t D = info_.head_dim, G = r.G;
  const size_t n = r.n, row0 = (size_t{r.layer} * r.Hs + hh) * r.C;
  const size_t es = elem_size(r.b->dtype);
  const float* qg = qf_.data() + size_t{hh} * G * D;
  if (p_.policy == UCM_POLICY_GSA) {
    const uint32_t B = info_.hash_bits, Bb = B / 8, T = info_.block_size;
    tmp_.resize(size_t{D} + B);
    // The group's mean query, sign-hashed. The sum has the same signs (positive scaling), and
    // no division keeps exact inputs exact.
    float* qm = tmp_.data();
    for (uint32_t d = 0; d < D; ++d) {
      float s = 0;
      for (uint32_t g = 0; g < G; ++g) s += qg[size_t{g} * D + d];
      qm[d] = s;
    }
    code_.resize(Bb);
    const float* P = proj_.data() + (size_t{r.layer} * info_.num_kv_heads + r.h0 + hh) * D * B;
    sign_hash(qm, P, D, B, tmp_.data() + D, code_.data());
    hamming_scores(r.b->r4 + row0 * T * Bb, n, T, Bb, code_.data(), out);
  } else {
    tmp_.resize(size_t{G} * n);
    if (p_.policy == UCM_POLICY_ESA)
      dot_scores(static_cast<const uint8_t*>(r.b->r0) + row0 * D * es, r.b->dtype, n, D, qg, G, tmp_.data());
    else
      bound_scores(static_cast<const uint8_t*>(r.b->r1) + row0 * 2 * D * es, r.b->dtype, n, D, qg, G, tmp_.data());
    std::copy(tmp_.begin(), tmp_.begin() + std::ptrdiff_t(n), out);
    for (uint32_t g = 1; g < G; ++g) {
      const float* t = tmp_.data() + size_t{g} * n;
      for (size_t c = 0; c < n; ++c) out[c] = t[c] > out[c] ? t[c] : out[c];
    }
  }
  for (size_t c = 0; c < n; ++c)
    if (std::isnan(out[c]) || (r.valid && !r.valid[c])) out[c] = kNegInf;
}

void Retriever::add_head_masses(const Resolved& r, uint32_t hh, float* acc) {
  const uint32_t D = info_.head_dim, G = r.G;
  const size_t n = r.n, row0 = (size_t{r.layer} * r.Hs + hh) * r.C;
  const size_t es = elem_size(r.b->dtype);
  tmp_.resize(size_t{G} * n);
  bound_scores(static_cast<const uint8_t*>(r.b->r1) + row0 * 2 * D * es, r.b->dtype, n, D,
               qf_.data() + size_t{hh} * G * D, G, tmp_.data());
  const float inv_sqrt_d = 1.0f / std::sqrt(float(D));
  auto usable = [&](size_t c, float u) { return std::isfinite(u) && (!r.valid || r.valid[c]); };
  for (uint32_t g = 0; g < G; ++g) {
    float* u = tmp_.data() + size_t{g} * n;
    float M = kNegInf;
    for (size_t c = 0; c < n; ++c)
      if (usable(c, u[c])) M = u[c] > M ? u[c] : M;
    if (M == kNegInf) continue;  // no scorable block
    ok_.resize(n);
    for (size_t c = 0; c < n; ++c) {
      ok_[c] = usable(c, u[c]) ? 1 : 0;
      u[c] = ok_[c] ? (u[c] - M) * inv_sqrt_d : 0.0f;
    }
    exp_nonpositive(u, n);
    double Z = 0;
    for (size_t c = 0; c < n; ++c) {
      u[c] = ok_[c] ? u[c] : 0.0f;
      Z += u[c];
    }
    if (Z <= 0) continue;
    const float inv = float(1.0 / Z);
    for (size_t c = 0; c < n; ++c) acc[c] += u[c] * inv;
  }
}

void Retriever::compute(const Resolved& r, std::vector<std::vector<uint32_t>>* sets) {
  const size_t n = r.n;
  const bool shared = p_.shared_heads != 0;
  sets->assign(shared ? 1 : r.Hs, {});
  s_.resize(n);
  acc_.resize(n);
  const size_t k = r.top_k > 0 ? std::min(r.top_k, n) : budget(p_, n);
  if (p_.policy == UCM_POLICY_PSA) {
    const size_t cap = p_.psa_max_blocks > 0 ? std::min<size_t>(p_.psa_max_blocks, n) : k;
    auto finish = [&](uint32_t heads, std::vector<uint32_t>* out) {
      const float inv = 1.0f / float(heads);
      for (size_t c = 0; c < n; ++c) acc_[c] *= inv;
      select_psa(acc_.data(), n, r.valid, p_.sink_blocks, p_.local_blocks, double(p_.psa_tau), cap, sel_, out);
    };
    if (shared) {
      std::fill(acc_.begin(), acc_.end(), 0.0f);
      for (uint32_t hh = 0; hh < r.Hs; ++hh) add_head_masses(r, hh, acc_.data());
      finish(r.Hs * r.G, &(*sets)[0]);
    } else {
      for (uint32_t hh = 0; hh < r.Hs; ++hh) {
        std::fill(acc_.begin(), acc_.end(), 0.0f);
        add_head_masses(r, hh, acc_.data());
        finish(r.G, &(*sets)[hh]);
      }
    }
    return;
  }
  if (shared) {
    std::fill(acc_.begin(), acc_.end(), kNegInf);
    for (uint32_t hh = 0; hh < r.Hs; ++hh) {
      head_scores(r, hh, s_.data());
      for (size_t c = 0; c < n; ++c) acc_[c] = s_[c] > acc_[c] ? s_[c] : acc_[c];
    }
    select_topk(acc_.data(), n, r.valid, p_.sink_blocks, p_.local_blocks, k, sel_, &(*sets)[0]);
  } else {
    for (uint32_t hh = 0; hh < r.Hs; ++hh) {
      head_scores(r, hh, s_.data());
      select_topk(s_.data(), n, r.valid, p_.sink_blocks, p_.local_blocks, k, sel_, &(*sets)[hh]);
    }
  }
}

Status Retriever::select(const ucm_retrieval_query& q, uint32_t* indices, size_t cap, uint32_t* counts,
                         uint32_t* n_sets) {
  Resolved r;
  UCM_RETURN_IF_ERROR(resolve(q, &r));
  if (!indices || !counts) return bad("indices and counts must not be NULL");
  const bool dense = p_.honor_dense_layers && r.layer < 64 && ((info_.dense_layers >> r.layer) & 1u);
  std::vector<std::vector<uint32_t>> sets;
  LayerState& st = state_[r.layer];
  bool computed = false;
  if (dense) {
    sets.assign(1, std::vector<uint32_t>(r.n));
    for (size_t c = 0; c < r.n; ++c) sets[0][c] = uint32_t(c);
  } else {
    const size_t want = p_.shared_heads ? 1 : r.Hs;
    const bool reuse = p_.reuse_steps > 1 && st.valid && st.since < p_.reuse_steps && r.n >= st.n &&
                       st.h0 == r.h0 && st.Hs == r.Hs && st.top_k == r.top_k && st.sets.size() == want;
    if (reuse) {
      sets = st.sets;
      for (auto& s : sets)
        for (size_t c = st.n; c < r.n; ++c) s.push_back(uint32_t(c));  // blocks appended since: attended
    } else {
      load_queries(q, r);
      compute(r, &sets);
      computed = true;
    }
  }
  for (size_t s = 0; s < sets.size(); ++s)
    if (sets[s].size() > cap)
      return bad("set " + std::to_string(s) + " holds " + std::to_string(sets[s].size()) + " blocks, cap is " +
                 std::to_string(cap) + " (cap >= n_blocks always suffices)");
  for (size_t s = 0; s < sets.size(); ++s) {
    if (!sets[s].empty()) std::memcpy(indices + s * cap, sets[s].data(), sets[s].size() * sizeof(uint32_t));
    counts[s] = uint32_t(sets[s].size());
  }
  if (n_sets) *n_sets = uint32_t(sets.size());
  if (computed) {
    st.valid = true;
    st.since = 1;
    st.n = r.n;
    st.h0 = r.h0;
    st.Hs = r.Hs;
    st.top_k = r.top_k;
    st.sets = std::move(sets);
  } else if (!dense) {
    ++st.since;
  }
  return Status::OK();
}

}  // namespace ucm::retrieval
