// lib/src/blend/rope.cc: see ucm/core/blend/rope.h.
#include "ucm/core/blend/rope.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numbers>
#include <numeric>

#include "ucm/half.h"
#include "ucm/retrieval.h"

namespace ucm::blend {


ucm_rope_params default_rope() {
  ucm_rope_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.theta = 10000.0;
  p.scaling = UCM_ROPE_SCALING_NONE;
  p.factor = 1.0;
  p.low_freq_factor = 1.0;
  p.high_freq_factor = 4.0;
  p.original_max_position_embeddings = 8192;
  return p;
}

Status check_rope(const ucm_rope_params& p) {
  if (p.head_dim == 0 || p.head_dim % 2)
    return Status::InvalidArgument("rope: head_dim " + std::to_string(p.head_dim) + " must be even and > 0");
  if (!(p.theta > 0)) return Status::InvalidArgument("rope: theta must be > 0");
  if (p.scaling == UCM_ROPE_SCALING_NONE) return Status::OK();
  if (p.scaling != UCM_ROPE_SCALING_LINEAR && p.scaling != UCM_ROPE_SCALING_LLAMA3)
    return Status::NotSupported("rope: scaling " + std::to_string(p.scaling) +
                                " is not none, linear or llama3: stored keys cannot be moved exactly");
  if (!(p.factor > 0)) return Status::InvalidArgument("rope: scaling factor must be > 0");
  if (p.scaling == UCM_ROPE_SCALING_LLAMA3 &&
      !(p.low_freq_factor > 0 && p.high_freq_factor > p.low_freq_factor && p.original_max_position_embeddings > 0))
    return Status::InvalidArgument(
        "rope: llama3 scaling needs 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings > 0");
  return Status::OK();
}

Status parse_rope(const std::string& text, ucm_rope_params* out) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::InvalidArgument("rope attachment is not a JSON object");
  auto num = [&](const nlohmann::json& o, const char* k, double* v) -> Status {
    if (!o.contains(k) || !o[k].is_number()) return Status::InvalidArgument(std::string("rope attachment: no number \"") + k + "\"");
    *v = o[k].get<double>();
    return Status::OK();
  };
  ucm_rope_params p = default_rope();
  const std::string style = j.value("style", "");
  if (style != "rotate_half")
    return Status::NotSupported("rope attachment: style \"" + style + "\" is not rotate_half");
  double d = 0;
  UCM_RETURN_IF_ERROR(num(j, "theta", &p.theta));
  UCM_RETURN_IF_ERROR(num(j, "head_dim", &d));
  p.head_dim = uint32_t(d);
  if (!j.contains("scaling") || !j["scaling"].is_object())
    return Status::InvalidArgument("rope attachment: no object \"scaling\"");
  const auto& s = j["scaling"];
  const std::string type = s.value("type", "");
  if (type == "none") {
    p.scaling = UCM_ROPE_SCALING_NONE;
  } else if (type == "linear") {
    p.scaling = UCM_ROPE_SCALING_LINEAR;
    UCM_RETURN_IF_ERROR(num(s, "factor", &p.factor));
  } else if (type == "llama3") {
    p.scaling = UCM_ROPE_SCALING_LLAMA3;
    UCM_RETURN_IF_ERROR(num(s, "factor", &p.factor));
    UCM_RETURN_IF_ERROR(num(s, "low_freq_factor", &p.low_freq_factor));
    UCM_RETURN_IF_ERROR(num(s, "high_freq_factor", &p.high_freq_factor));
    UCM_RETURN_IF_ERROR(num(s, "original_max_position_embeddings", &d));
    p.original_max_position_embeddings = uint32_t(d);
  } else {
    return Status::NotSupported("rope scaling \"" + type +
                                "\" is not supported for chunks (none, linear, llama3): a stored key cannot be moved "
                                "exactly, so the namespace is not served");
  }
  UCM_RETURN_IF_ERROR(check_rope(p));
  *out = p;
  return Status::OK();
}

std::vector<float> inv_freq(const ucm_rope_params& p) {
  const uint32_t D = p.head_dim;
  std::vector<float> w(D / 2);
  for (uint32_t i = 0; i < D / 2; ++i) {
    // transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), fp32.
    const float e = float(2 * i) / float(D);
    w[i] = 1.0f / std::pow(float(p.theta), e);
  }
  if (p.scaling == UCM_ROPE_SCALING_LINEAR) {
    for (auto& x : w) x = float(double(x) / p.factor);
  } else if (p.scaling == UCM_ROPE_SCALING_LLAMA3) {
    // transformers _compute_llama3_parameters.
    const double old_ctx = p.original_max_position_embeddings;
    const double low_wavelen = old_ctx / p.low_freq_factor, high_wavelen = old_ctx / p.high_freq_factor;
    for (auto& x : w) {
      const double wavelen = 2 * std::numbers::pi / double(x);
      const double inv_l = wavelen > low_wavelen ? double(x) / p.factor : double(x);
      if (wavelen >= high_wavelen && wavelen <= low_wavelen) {
        const double smooth = (old_ctx / wavelen - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor);
        x = float((1 - smooth) * inv_l / p.factor + smooth * inv_l);
      } else {
        x = float(inv_l);
      }
    }
  }
  return w;
}

namespace {

template <class T, class Load, class Store>
void shift_rows(T* keys, size_t n_tokens, uint32_t n_heads, uint32_t D, size_t stride, const std::vector<float>& c,
                const std::vector<float>& s, Load load, Store store) {
  const uint32_t half = D / 2;
  for (size_t t = 0; t < n_tokens; ++t)
    for (uint32_t h = 0; h < n_heads; ++h) {
      T* k = keys + t * stride + size_t{h} * D;
      for (uint32_t d = 0; d < half; ++d) {
        const float x1 = load(k[d]), x2 = load(k[d + half]);
        const float cf = c[d], sf = s[d];
        k[d] = store(x1 * cf - x2 * sf);
        k[d + half] = store(x2 * cf + x1 * sf);
      }
    }
}

}  // namespace

void shift_table(const std::vector<float>& w, int64_t delta, float* cos_out, float* sin_out) {
  for (size_t d = 0; d < w.size(); ++d) {
    const double a = double(delta) * double(w[d]);
    cos_out[d] = float(std::cos(a));
    sin_out[d] = float(std::sin(a));
  }
}

void shift_keys(const std::vector<float>& w, void* keys, int dtype, size_t n_tokens, uint32_t n_heads,
                uint32_t head_dim, size_t token_stride, int64_t delta) {
  std::vector<float> c(head_dim / 2), s(head_dim / 2);
  shift_table(w, delta, c.data(), s.data());
  if (dtype == UCM_DTYPE_F32)
    shift_rows(static_cast<float*>(keys), n_tokens, n_heads, head_dim, token_stride, c, s, [](float x) { return x; },
               [](float x) { return x; });
  else if (dtype == UCM_DTYPE_BF16)
    shift_rows(static_cast<uint16_t*>(keys), n_tokens, n_heads, head_dim, token_stride, c, s, bf16_to_f32, f32_to_bf16);
  else
    shift_rows(static_cast<uint16_t*>(keys), n_tokens, n_heads, head_dim, token_stride, c, s, f16_to_f32, f32_to_f16);
}

std::vector<uint32_t> select_tokens(const float* stored, const float* fresh, size_t n, size_t row, double ratio,
                                    const uint32_t* doc_pos, double position_decay, const float* relevance,
                                    double relevance_exponent, float* score) {
  std::vector<double> dev(n);
  const bool prior = doc_pos && position_decay > 0;
  const bool relevant = relevance && relevance_exponent > 0;
  for (size_t i = 0; i < n; ++i) {
    double acc = 1;
    if (stored && fresh) {
      acc = 0;
      const float* a = stored + i * row;
      const float* b = fresh + i * row;
      for (size_t j = 0; j < row; ++j) {
        const double d = double(a[j]) - double(b[j]);
        acc += d * d;
      }
    }
    if (prior) acc *= std::exp(-double(doc_pos[i]) / position_decay);
    if (relevant) acc *= std::pow(double(relevance[i]), relevance_exponent);
    dev[i] = std::isnan(acc) ? INFINITY : acc;  // a NaN row deviates most: recompute it
  }
  if (score)
    for (size_t i = 0; i < n; ++i) score[i] = float(dev[i]);
  const size_t k = std::min(n, size_t(std::ceil(ratio * double(n) - 1e-9)));
  std::vector<uint32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0u);
  std::stable_sort(idx.begin(), idx.end(), [&](uint32_t x, uint32_t y) { return dev[x] > dev[y]; });
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace ucm::blend
