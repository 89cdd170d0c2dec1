// pipelines/model/include/ucm/model/attn_ops.h: what the two CPU attention ops (ops::attention_bf16,
// cpu_bf16_ops.cc; ops::attention_f32, cpu_fp32_ops.cc) share: the checks of their tensors, the
// filling of their kernels' argument structs (kernels::cpu::AttnArgs, kernels::cpu::f32::AttnArgs: the same field
// names), a scratch buffer per thread, and the row split of their row ops and GEMMs. Internal to
// ucm_model.
#pragma once
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "ucm/model/crew.h"
#include "ucm/model/llama_model.h"

namespace ucm::model::ops::detail {

inline void need(bool ok, const char* fn, const std::string& what) {
  if (!ok) throw ModelError(std::string("ops::") + fn + ": " + what);
}

/// A bf16 tensor's elements as raw bits (the kernels' uint16_t).
inline uint16_t* bits(const torch::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); }

/// Rows per task of a row op (at::parallel_for's grain): about 64 KiB of fp32 input each.
inline int64_t grain(int64_t row_elems) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, row_elems)); }

/// fn(r0, r1) over rows [0, R) of a row op: in parts of at least ~256 KiB of fp32 input on the
/// crew's idle helpers (crew.h) where the calling thread has a crew, else on libtorch's intra-op
/// threads (at::parallel_for, grain() rows per task).
template <class F>
void for_rows(int64_t R, int64_t row_elems, const F& fn) {
  const int64_t part = std::max<int64_t>(16, 65536 / std::max<int64_t>(1, row_elems));
  if (!share_rows(R, part, 1, fn)) at::parallel_for(0, R, grain(row_elems), fn);
}

/// Deals `units` attention units round-robin: run(i, n) for each share i of n, share i taking
/// units i, i + n, ... (a causal mask makes later row blocks dearer, and consecutive units
/// alternate between threads); the shares go to the crew's idle helpers (crew.h) where the calling
/// thread has a crew, else to libtorch's intra-op threads.
template <class F>
void deal_units(int64_t units, const F& run) {
  if (Crew* c = this_crew(); c && units > 1) {
    c->share(int(std::min<int64_t>(units, 64)), [&](int p, int n) { run(p, n); });
    return;
  }
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), units));
  at::parallel_for(0, nt, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) run(i, nt);
  });
}

/// A prefill GEMM's rows run as pieces fixed by its row count alone (never by the number of
/// workers or by which of them are idle), so that its output, and the K/V a precompute stores, are
/// the same bits whatever `--threads` and the scheduler did (docs/model.md, "One result whatever
/// the workers"). A BLAS gives a row bits that depend on where the row falls in the call's own row
/// tiling: OpenBLAS 0.3.21's Haswell/Zen sgemm kernels (what OPENBLAS_CORETYPE=Haswell runs) give
/// the last 4 rows of a call of 16 rows other bits than the same rows inside a call of 128, so a
/// split made by the workers present changed the stored K/V (issue 55). Pieces: the largest count
/// in {48, 24, 12, 6, 4, 2} that leaves each piece at least kGemmPieceRows rows (divisible by 2,
/// 3 and 4 workers from 12 pieces on), else 1 (the whole GEMM in one call); piece i is rows
/// [split_at(R, i, P, 16), split_at(R, i + 1, P, 16)).
constexpr int64_t kGemmPieceRows = 256;

inline int gemm_pieces(int64_t R) {
  for (int p : {48, 24, 12, 6, 4, 2})
    if (R >= p * kGemmPieceRows) return p;
  return 1;
}

/// fn(r0, r1) once for each of gemm_pieces(R) pieces of rows [0, R): dealt round-robin to the
/// crew's idle helpers where the calling thread has a crew (Crew::share), else in order on the
/// calling thread. The pieces, and so the bits, are the same either way.
template <class F>
void for_gemm_pieces(int64_t R, const F& fn) {
  const int P = gemm_pieces(R);
  auto piece = [&](int i) { fn(split_at(R, i, P, 16), split_at(R, i + 1, P, 16)); };
  Crew* c = this_crew();
  if (!c || P == 1) {
    for (int i = 0; i < P; ++i) piece(i);
    return;
  }
  c->share(P, [&](int p, int n) {
    for (int i = p; i < P; i += n) piece(i);
  });
}

/// The host tensors a filled Args points into (keep them alive for the call).
struct AttnHold {
  torch::Tensor pos, lens;
};

/// Checks q fp32 [B, T, nh, hd], k and v both fp32 or both bf16 [B, S, nkv, hd] (heads hd apart,
/// dims contiguous, on the CPU), qpos int64 [T], q_len (optional) int64 [B], and fills every field
/// of a but `out` (and the optional fields of one kind). Throws ModelError naming fn.
template <class Args>
AttnHold fill_attn_args(const char* fn, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& qpos, int64_t window, double scale, const torch::Tensor& q_len, Args& a) {
  auto rows_4d = [](const torch::Tensor& t, torch::ScalarType dt) {
    return t.dim() == 4 && t.scalar_type() == dt && t.device().is_cpu() && t.stride(3) == 1 && t.stride(2) == t.size(3);
  };
  const bool kv16 = k.scalar_type() == torch::kBFloat16;
  const auto kv_dt = kv16 ? torch::kBFloat16 : torch::kFloat;
  need(rows_4d(q, torch::kFloat) && rows_4d(k, kv_dt) && rows_4d(v, kv_dt), fn,
       "q must be fp32 and k, v both fp32 or both bf16, [B, *, heads, hd] on the CPU, heads hd apart, dims contiguous");
  need(k.sizes() == v.sizes() && q.size(0) == k.size(0) && q.size(3) == k.size(3), fn,
       "k and v must be [B, S, nkv, hd] with q's B and hd");
  need(qpos.dim() == 1 && qpos.size(0) == q.size(1) && qpos.scalar_type() == torch::kLong, fn, "qpos must be int64 [T]");
  AttnHold hold;
  hold.pos = qpos.cpu().contiguous();
  if (q_len.defined()) {
    need(q_len.dim() == 1 && q_len.size(0) == q.size(0) && q_len.scalar_type() == torch::kLong, fn,
         "q_len must be int64 [B]");
    hold.lens = q_len.cpu().contiguous();
  }
  a.B = q.size(0);
  a.T = q.size(1);
  a.nh = q.size(2);
  a.hd = q.size(3);
  a.S = k.size(1);
  a.nkv = k.size(2);
  a.q = q.data_ptr<float>();
  if (kv16) {
    a.k16 = reinterpret_cast<const uint16_t*>(k.data_ptr<at::BFloat16>());
    a.v16 = reinterpret_cast<const uint16_t*>(v.data_ptr<at::BFloat16>());
  } else {
    a.k = k.data_ptr<float>();
    a.v = v.data_ptr<float>();
  }
  a.q_sb = q.stride(0);
  a.q_st = q.stride(1);
  a.k_sb = k.stride(0);
  a.k_st = k.stride(1);
  a.v_sb = v.stride(0);
  a.v_st = v.stride(1);
  a.qpos = hold.pos.data_ptr<int64_t>();
  a.q_len = hold.lens.defined() ? hold.lens.data_ptr<int64_t>() : nullptr;
  a.window = window;
  a.scale = float(scale);
  return hold;
}

/// At least `bytes` of 64-byte aligned scratch owned by the calling thread (grown, never shrunk;
/// one buffer per thread for both attention ops). Throws ModelError naming fn when out of memory.
void* thread_scratch(size_t bytes, const char* fn);

}  // namespace ucm::model::ops::detail
