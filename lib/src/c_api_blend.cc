// lib/src/c_api_blend.cc: the C ABI of ucm/blend.h over lib/src/blend/. No exception crosses
// this boundary.
#include "ucm/blend.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>

#include "ucm/core/blend/rope.h"
#include "ucm/core/c_api_internal.h"
#include "ucm/core/c_struct.h"
#include "ucm/core/cuda_plugin.h"
#include "ucm/retrieval.h"

using ucm::capi::fail;
using ucm::capi::guarded;
using ucm::capi::ns_of;
using ucm::capi::ok;
using ucm::capi::read_struct;
using ucm::capi::write_struct;

extern "C" {

UCM_API ucm_rope_params ucm_rope_default_params(void) { return ucm::blend::default_rope(); }

UCM_API int ucm_store_rope_params(ucm_store_t* store, const uint8_t* ns, ucm_rope_params* out) {
  return guarded("ucm_store_rope_params", [&] {
    if (!store || !ns || !out) return fail(UCM_E_INVALID, "ucm_store_rope_params: store, ns and out must not be NULL");
    ucm::Status s = ucm::capi::check_struct_size<ucm_rope_params>("ucm_store_rope_params: out", out->struct_size);
    if (!s.ok()) return fail(s);
    std::string data;
    s = store->s->get_attachment(ns_of(ns), "rope", &data);
    if (s.code() == ucm::Code::kNotFound)
      return fail(UCM_E_NOT_FOUND, "ucm_store_rope_params: the namespace has no \"rope\" attachment (it holds no "
                                   "chunks; precompute them with `ucm precompute --chunks`)");
    if (!s.ok()) return fail(s);
    ucm_rope_params p = ucm::blend::default_rope();
    s = ucm::blend::parse_rope(data, &p);
    if (s.ok()) s = write_struct("ucm_store_rope_params: out", p, out);
    return s.ok() ? ok() : fail(s);
  });
}

UCM_API int ucm_store_chunk_prefix(ucm_store_t* store, const uint8_t* ns, uint32_t* tokens, size_t cap, size_t* n) {
  return guarded("ucm_store_chunk_prefix", [&] {
    if (!store || !ns || !n) return fail(UCM_E_INVALID, "ucm_store_chunk_prefix: store, ns and n must not be NULL");
    std::string data;
    ucm::Status s = store->s->get_attachment(ns_of(ns), "chunk_prefix", &data);
    if (s.code() == ucm::Code::kNotFound)
      return fail(UCM_E_NOT_FOUND, "ucm_store_chunk_prefix: the namespace holds no chunks (no \"chunk_prefix\" "
                                   "attachment; precompute them with `ucm precompute --chunks`)");
    if (!s.ok()) return fail(s);
    if (data.size() % 4) return fail(UCM_E_INVALID, "ucm_store_chunk_prefix: the attachment is not a whole number of u32");
    *n = data.size() / 4;
    if (*n > cap || (!tokens && *n))
      return fail(UCM_E_INVALID, "ucm_store_chunk_prefix: " + std::to_string(*n) + " tokens, buffer holds " +
                                     std::to_string(cap));
    for (size_t i = 0; i < *n; ++i) {
      const auto* b = reinterpret_cast<const uint8_t*>(data.data()) + 4 * i;
      tokens[i] = uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
    }
    return ok();
  });
}

namespace {

// The checks ucm_rope_shift and ucm_rope_shift_device share; UCM_OK when the shift may run, with
// *rope the caller's params as this library's struct (the growth rule).
int check_shift(const char* fn, const ucm_rope_params* rope_in, const void* keys, int32_t dtype, size_t n_tokens,
                uint32_t n_heads, size_t token_stride, ucm_rope_params* rope) {
  const std::string f = fn;
  if (!rope_in || (!keys && n_tokens)) return fail(UCM_E_INVALID, f + ": rope and keys must not be NULL");
  ucm::Status s = read_struct(f + ": rope", rope_in, ucm::blend::default_rope(), rope);
  if (s.ok()) s = ucm::blend::check_rope(*rope);
  if (!s.ok()) return fail(s);
  if (dtype != UCM_DTYPE_BF16 && dtype != UCM_DTYPE_F16 && dtype != UCM_DTYPE_F32)
    return fail(UCM_E_INVALID, f + ": dtype " + std::to_string(dtype) + " is not BF16, F16 or F32");
  if (n_heads == 0 || token_stride < size_t{n_heads} * rope->head_dim)
    return fail(UCM_E_INVALID, f + ": token_stride " + std::to_string(token_stride) + " < n_heads * head_dim");
  return UCM_OK;
}

}  // namespace

UCM_API int ucm_rope_shift(const ucm_rope_params* rope_in, void* keys, int32_t dtype, size_t n_tokens,
                           uint32_t n_heads, size_t token_stride, int64_t delta) {
  return guarded("ucm_rope_shift", [&] {
    ucm_rope_params rope = ucm::blend::default_rope();
    const int rc = check_shift("ucm_rope_shift", rope_in, keys, dtype, n_tokens, n_heads, token_stride, &rope);
    if (rc != UCM_OK) return rc;
    if (n_tokens == 0 || delta == 0) return ok();
    ucm::blend::shift_keys(ucm::blend::inv_freq(rope), keys, dtype, n_tokens, n_heads, rope.head_dim, token_stride,
                           delta);
    return ok();
  });
}

UCM_API int ucm_rope_shift_device(const ucm_rope_params* rope_in, void* keys, int32_t dtype, size_t n_tokens,
                                  uint32_t n_heads, size_t token_stride, int64_t delta, int device, void* stream) {
  return guarded("ucm_rope_shift_device", [&] {
    ucm_rope_params rope_v = ucm::blend::default_rope();
    const int rc =
        check_shift("ucm_rope_shift_device", rope_in, keys, dtype, n_tokens, n_heads, token_stride, &rope_v);
    if (rc != UCM_OK) return rc;
    const ucm_rope_params* rope = &rope_v;
    if (rope->head_dim / 2 > ucm::kernels::kMaxRopePairs)
      return fail(UCM_E_INVALID, "ucm_rope_shift_device: head_dim " + std::to_string(rope->head_dim) + " > 512");
    const ucm_cuda_plugin* p = nullptr;
    ucm::Status s = ucm::detail::cuda_device(device, &p);
    if (!s.ok()) return fail(UCM_E_NOT_SUPPORTED, "ucm_rope_shift_device: " + s.message());
    if (n_tokens == 0 || delta == 0) return ok();
    auto a = std::make_unique<ucm::kernels::RopeShiftArgs>();
    a->keys = keys;
    a->dtype = dtype;
    a->n_tokens = n_tokens;
    a->token_stride = token_stride;
    a->n_heads = n_heads;
    a->D = rope->head_dim;
    ucm::blend::shift_table(ucm::blend::inv_freq(*rope), delta, a->cos, a->sin);
    s = ucm::detail::cuda_status(*p, p->set_device(device), "cudaSetDevice(" + std::to_string(device) + ")");
    if (s.ok()) s = ucm::detail::cuda_status(*p, p->rope_shift(a.get(), stream), "rope shift launch");
    return s.ok() ? ok() : fail(s);
  });
}

UCM_API int ucm_blend_select(const float* stored, const float* fresh, size_t n_tokens, size_t row, double ratio,
                             uint32_t* out_idx, size_t cap, size_t* n_out, float* deviation) {
  return guarded("ucm_blend_select", [&] {
    if (!n_out || (n_tokens && (!stored || !fresh)))
      return fail(UCM_E_INVALID, "ucm_blend_select: stored, fresh and n_out must not be NULL");
    if (!(ratio >= 0.0 && ratio <= 1.0))
      return fail(UCM_E_INVALID, "ucm_blend_select: ratio must be in [0, 1]");
    auto idx = ucm::blend::select_tokens(stored, fresh, n_tokens, row, ratio, nullptr, 0, nullptr, 0, deviation);
    *n_out = idx.size();
    if (idx.size() > cap || (!out_idx && !idx.empty()))
      return fail(UCM_E_INVALID, "ucm_blend_select: " + std::to_string(idx.size()) + " tokens selected, out_idx holds " +
                                     std::to_string(cap));
    if (!idx.empty()) std::memcpy(out_idx, idx.data(), idx.size() * sizeof(uint32_t));
    return ok();
  });
}

UCM_API ucm_blend_select_params ucm_blend_select_default_params(void) {
  ucm_blend_select_params p{};
  p.struct_size = sizeof(ucm_blend_select_params);
  p.ratio = 0.15;
  p.position_decay = 128;
  p.relevance_exponent = 2;
  return p;
}

}  // extern "C"

namespace {

// ucm_blend_select_weighted (relevance NULL) and ucm_blend_select_relevant.
int select_scored(const char* fn, const ucm_blend_select_params* params_in, const float* stored, const float* fresh,
                  const uint32_t* doc_pos, const float* relevance, bool deviation_optional, size_t n_tokens,
                  size_t row, uint32_t* out_idx, size_t cap, size_t* n_out, float* score) {
  return guarded(fn, [&] {
    const std::string f = fn;
    if (!params_in || !n_out || (n_tokens && (deviation_optional ? (!stored != !fresh) : (!stored || !fresh))))
      return fail(UCM_E_INVALID, f + (deviation_optional ? ": params and n_out must not be NULL, and stored and fresh "
                                                           "are both given or both NULL"
                                                         : ": params, stored, fresh and n_out must not be NULL"));
    // 0.4's struct ended at position_decay: its callers get relevance_exponent's default.
    ucm_blend_select_params pv = ucm_blend_select_default_params();
    const ucm::Status rs = read_struct(f + ": params", params_in, pv, &pv);
    if (!rs.ok()) return fail(rs);
    const ucm_blend_select_params* params = &pv;
    const double beta = params->relevance_exponent;
    if (!(params->ratio >= 0.0 && params->ratio <= 1.0)) return fail(UCM_E_INVALID, f + ": ratio must be in [0, 1]");
    if (!(params->position_decay >= 0.0) || std::isinf(params->position_decay))
      return fail(UCM_E_INVALID, f + ": position_decay must be a finite number >= 0 (0: no prior)");
    if (relevance) {
      if (!(beta >= 0.0) || std::isinf(beta))
        return fail(UCM_E_INVALID, f + ": relevance_exponent must be a finite number >= 0 (0: relevance ignored)");
      for (size_t i = 0; i < n_tokens; ++i)
        if (!(relevance[i] >= 0.0f))
          return fail(UCM_E_INVALID, f + ": relevance[" + std::to_string(i) + "] is negative or NaN");
    }
    auto idx = ucm::blend::select_tokens(stored, fresh, n_tokens, row, params->ratio, doc_pos, params->position_decay,
                                         relevance, beta, score);
    *n_out = idx.size();
    if (idx.size() > cap || (!out_idx && !idx.empty()))
      return fail(UCM_E_INVALID, f + ": " + std::to_string(idx.size()) + " tokens selected, out_idx holds " +
                                     std::to_string(cap));
    if (!idx.empty()) std::memcpy(out_idx, idx.data(), idx.size() * sizeof(uint32_t));
    return ok();
  });
}

}  // namespace

extern "C" {

UCM_API int ucm_blend_select_weighted(const ucm_blend_select_params* params, const float* stored, const float* fresh,
                                      const uint32_t* doc_pos, size_t n_tokens, size_t row, uint32_t* out_idx,
                                      size_t cap, size_t* n_out, float* score) {
  return select_scored("ucm_blend_select_weighted", params, stored, fresh, doc_pos, nullptr, false, n_tokens, row,
                       out_idx, cap, n_out, score);
}

UCM_API int ucm_blend_select_relevant(const ucm_blend_select_params* params, const float* stored, const float* fresh,
                                      const uint32_t* doc_pos, const float* relevance, size_t n_tokens, size_t row,
                                      uint32_t* out_idx, size_t cap, size_t* n_out, float* score) {
  return select_scored("ucm_blend_select_relevant", params, stored, fresh, doc_pos, relevance, true, n_tokens, row,
                       out_idx, cap, n_out, score);
}

}  // extern "C"
