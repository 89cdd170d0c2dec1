#include "ucm/model/llama_model.h"

#include "ucm/model/compute.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>
#include <thread>
#include <vector>

#include "layer_kernels.h"
#include "ucm/model/llama_ops.h"
#include "ucm/model/identity.h"
#include "ucm/safetensors/safetensors.h"

namespace ucm::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
namespace st = ucm::safetensors;
using ops::rms_norm;

std::string shape_str(c10::IntArrayRef s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

c10::ScalarType torch_dtype(st::DType d, const std::string& name, const std::string& dir) {
  switch (d) {
    case st::DType::F32: return torch::kFloat;
    case st::DType::F16: return torch::kHalf;
    case st::DType::BF16: return torch::kBFloat16;
    case st::DType::F64: return torch::kDouble;
    default:
      throw ModelError("model " + dir + ": tensor '" + name + "' has dtype " + st::dtype_name(d) +
                       "; only F32, F16, BF16, F64 weights are supported");
  }
}

// Copies tensor `name` (checked to have shape `expect`) into `dst` (fp32, any device).
void load_into(const st::Collection& c, const std::string& name, std::vector<int64_t> expect, torch::Tensor dst,
               const std::string& dir) {
  auto e = c.find(name);
  if (!e) throw ModelError("model " + dir + ": missing tensor '" + name + "' (expected shape " + shape_str(expect) + ")");
  if (e->info->shape != expect)
    throw ModelError("model " + dir + ": tensor '" + name + "' has shape " + shape_str(e->info->shape) +
                     ", expected " + shape_str(expect) + " from config.json");
  auto dt = torch_dtype(e->info->dtype, name, dir);
  auto bytes = e->data();
  auto src = torch::from_blob(const_cast<std::byte*>(bytes.data()), expect, torch::TensorOptions().dtype(dt));
  dst.copy_(src.view(dst.sizes()));
}

}  // namespace

torch::Tensor LlamaModel::rope_inv_freq() const {
  // transformers _compute_default_rope_parameters: 1 / base^(arange(0, d, 2) / d), fp32.
  const int64_t d = cfg_.head_dim;
  auto inv = 1.0 / torch::pow(torch::tensor(cfg_.rope_theta, torch::kFloat),
                              torch::arange(0, d, 2, torch::kLong).to(torch::kFloat) / static_cast<double>(d));
  const auto& rs = cfg_.rope_scaling;
  if (rs.type == RopeScaling::Type::Linear) {
    inv = inv / rs.factor;
  } else if (rs.type == RopeScaling::Type::Llama3) {
    // transformers _compute_llama3_parameters.
    const double old_ctx = static_cast<double>(rs.original_max_position_embeddings);
    const double low_wavelen = old_ctx / rs.low_freq_factor;
    const double high_wavelen = old_ctx / rs.high_freq_factor;
    auto wavelen = 2 * std::numbers::pi / inv;
    auto inv_l = torch::where(wavelen > low_wavelen, inv / rs.factor, inv);
    auto smooth = (old_ctx / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
    auto smoothed = (1 - smooth) * inv_l / rs.factor + smooth * inv_l;
    auto medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
    inv = torch::where(medium, smoothed, inv_l);
  }
  return inv.contiguous();
}

std::unique_ptr<LlamaModel> LlamaModel::load(const std::string& dir, torch::Device dev, torch::ScalarType compute) {
  if (compute != torch::kFloat && compute != torch::kBFloat16)
    throw ModelError("model " + dir + ": compute dtype must be fp32 or bf16");
  if (!fs::is_directory(dir))
    throw ModelError("model directory " + dir + " does not exist (for the default model run scripts/fetch_model.py)");
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->dir_ = dir;
  m->dev_ = dev;
  m->compute_ = compute;
  m->cfg_ = ModelConfig::from_json_file((fs::path(dir) / "config.json").string());
  const auto& c = m->cfg_;

  st::Collection w;
  try {
    w = st::Collection::open_dir(dir);
  } catch (const st::Error& e) {
    throw ModelError(std::string("model ") + dir + ": " + e.what());
  }
  // The weights' MD5 (the namespace fingerprint's weights_digest) reads every byte of the files
  // once, 0.4 s for SmolLM2-135M's 270 MB: a thread of its own computes it while this one copies
  // the weights in (the collection is read-only, its files mapped). Declared after `w`, so an
  // exception below waits for the thread before `w` goes.
  auto digest = std::async(std::launch::async, [&w] { return ucm::model::weights_digest(w); });
  c10::InferenceMode guard;
  const auto opt = torch::TensorOptions().dtype(torch::kFloat).device(dev);
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, hd = c.head_dim;
  const int64_t nq = c.num_attention_heads * hd, nkv = c.num_key_value_heads * hd;

  m->embed_ = torch::empty({V, H}, opt);
  load_into(w, "model.embed_tokens.weight", {V, H}, m->embed_, dir);
  m->norm_ = torch::empty({H}, opt);
  load_into(w, "model.norm.weight", {H}, m->norm_, dir);
  if (c.tie_word_embeddings) {
    m->lm_head_ = m->embed_;
  } else {
    m->lm_head_ = torch::empty({V, H}, opt);
    load_into(w, "lm_head.weight", {V, H}, m->lm_head_, dir);
  }
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Layer L;
    L.ln1 = torch::empty({H}, opt);
    L.ln2 = torch::empty({H}, opt);
    load_into(w, p + "input_layernorm.weight", {H}, L.ln1, dir);
    load_into(w, p + "post_attention_layernorm.weight", {H}, L.ln2, dir);
    L.wqkv = torch::empty({nq + 2 * nkv, H}, opt);
    load_into(w, p + "self_attn.q_proj.weight", {nq, H}, L.wqkv.narrow(0, 0, nq), dir);
    load_into(w, p + "self_attn.k_proj.weight", {nkv, H}, L.wqkv.narrow(0, nq, nkv), dir);
    load_into(w, p + "self_attn.v_proj.weight", {nkv, H}, L.wqkv.narrow(0, nq + nkv, nkv), dir);
    if (c.attention_bias) {
      L.bqkv = torch::empty({nq + 2 * nkv}, opt);
      load_into(w, p + "self_attn.q_proj.bias", {nq}, L.bqkv.narrow(0, 0, nq), dir);
      load_into(w, p + "self_attn.k_proj.bias", {nkv}, L.bqkv.narrow(0, nq, nkv), dir);
      load_into(w, p + "self_attn.v_proj.bias", {nkv}, L.bqkv.narrow(0, nq + nkv, nkv), dir);
    }
    if (c.qk_norm) {
      L.q_norm = torch::empty({hd}, opt);
      L.k_norm = torch::empty({hd}, opt);
      load_into(w, p + "self_attn.q_norm.weight", {hd}, L.q_norm, dir);
      load_into(w, p + "self_attn.k_norm.weight", {hd}, L.k_norm, dir);
    }
    L.wo = torch::empty({H, nq}, opt);
    load_into(w, p + "self_attn.o_proj.weight", {H, nq}, L.wo, dir);
    L.wgate_up = torch::empty({2 * I, H}, opt);
    load_into(w, p + "mlp.gate_proj.weight", {I, H}, L.wgate_up.narrow(0, 0, I), dir);
    load_into(w, p + "mlp.up_proj.weight", {I, H}, L.wgate_up.narrow(0, I, I), dir);
    L.wdown = torch::empty({H, I}, opt);
    load_into(w, p + "mlp.down_proj.weight", {H, I}, L.wdown, dir);
    m->layers_.push_back(std::move(L));
  }
  if (compute != torch::kFloat) {
    // The GEMM weights in the compute dtype (the fp32 copies are dropped); norms, biases, the
    // embedding table and RoPE stay fp32.
    for (auto& L : m->layers_) {
      L.wqkv = L.wqkv.to(compute);
      L.wo = L.wo.to(compute);
      L.wgate_up = L.wgate_up.to(compute);
      L.wdown = L.wdown.to(compute);
    }
    m->lm_head_ = m->lm_head_.to(compute);
  }
  m->kernels_ = &choose_layer_kernels(compute, dev, hd);
  m->inv_freq_ = m->rope_inv_freq().to(dev);
  m->digest_ = digest.get();
  return m;
}

LlamaModel::Output LlamaModel::forward(const torch::Tensor& tokens, const torch::Tensor& lengths,
                                       bool want_logits, torch::ScalarType kv_dtype) const {
  const auto& c = cfg_;
  auto bad = [&](const std::string& what) { throw ModelError("LlamaModel::forward (" + dir_ + "): " + what); };
  if (tokens.dim() != 2 || tokens.scalar_type() != torch::kLong) bad("tokens must be int64 [B, T]");
  if (lengths.dim() != 1 || lengths.scalar_type() != torch::kLong) bad("lengths must be int64 [B]");
  const int64_t B = tokens.size(0), T = tokens.size(1);
  if (B == 0 || T == 0) bad("tokens is empty: " + shape_str(tokens.sizes()));
  if (lengths.size(0) != B) bad("lengths has " + std::to_string(lengths.size(0)) + " entries for batch " + std::to_string(B));
  if (T > c.max_position_embeddings)
    bad("sequence length " + std::to_string(T) + " exceeds max_position_embeddings " +
        std::to_string(c.max_position_embeddings));
  c10::InferenceMode guard;
  {
    auto lc = lengths.cpu();
    if (lc.min().item<int64_t>() < 1 || lc.max().item<int64_t>() > T) bad("lengths must be in [1, T=" + std::to_string(T) + "]");
    auto tc = tokens.cpu();
    if (tc.min().item<int64_t>() < 0 || tc.max().item<int64_t>() >= c.vocab_size)
      bad("token ids (padding included) must be in [0, vocab_size=" + std::to_string(c.vocab_size) + ")");
  }
  if (kernels_ != &libtorch_layer_kernels()) return forward_packed(tokens, lengths, want_logits, kv_dtype);
  const int64_t W = dev_.is_cpu() ? std::min<int64_t>(prefill_workers_, B) : 1;
  if (W <= 1) return forward_rows(tokens, lengths, want_logits, kv_dtype);
  // Data parallel (set_prefill_workers): W groups of consecutive sequences, each on its own thread
  // with one libtorch thread; the outputs are concatenated back in batch order.
  std::vector<Output> part(static_cast<size_t>(W));
  std::vector<std::exception_ptr> err(static_cast<size_t>(W));
  std::vector<std::thread> pool;
  for (int64_t w = 0; w < W; ++w) {
    const int64_t b0 = B * w / W, b1 = B * (w + 1) / W;
    pool.emplace_back([&, w, b0, b1] {
      try {
        at::set_num_threads(1);  // this thread's OpenMP threads (forward_rows sets inference mode)
        part[size_t(w)] = forward_rows(tokens.narrow(0, b0, b1 - b0), lengths.narrow(0, b0, b1 - b0), want_logits,
                                       kv_dtype);
      } catch (...) {
        err[size_t(w)] = std::current_exception();
      }
    });
  }
  for (auto& t : pool) t.join();
  for (auto& e : err)
    if (e) std::rethrow_exception(e);
  Output out;
  out.k.resize(size_t(c.num_hidden_layers));
  out.v.resize(size_t(c.num_hidden_layers));
  std::vector<torch::Tensor> ks(static_cast<size_t>(W)), vs(static_cast<size_t>(W));
  for (size_t l = 0; l < out.k.size(); ++l) {
    for (size_t w = 0; w < size_t(W); ++w) {
      ks[w] = part[w].k[l];
      vs[w] = part[w].v[l];
    }
    out.k[l] = torch::cat(ks);
    out.v[l] = torch::cat(vs);
  }
  if (want_logits) {
    for (size_t w = 0; w < size_t(W); ++w) ks[w] = part[w].logits;
    out.logits = torch::cat(ks);
  }
  return out;
}

LlamaModel::Output LlamaModel::forward_rows(const torch::Tensor& tokens, const torch::Tensor& lengths,
                                            bool want_logits, torch::ScalarType kv_dtype) const {
  const auto& c = cfg_;
  const int64_t B = tokens.size(0), T = tokens.size(1);
  c10::InferenceMode guard;
  // Positions are 0..T-1 for every row (right padding).
  const auto pos = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(dev_));
  const Rope rope = rope_at(pos);
  Output out;
  out.k.resize(size_t(c.num_hidden_layers));
  out.v.resize(size_t(c.num_hidden_layers));
  auto x = embed_.index_select(0, tokens.to(dev_).reshape({B * T}));  // [B*T, H], fresh
  for (int64_t li = 0; li < c.num_hidden_layers; ++li) {
    LayerIo io;
    io.kv_dtype = kv_dtype;
    io.k_out = &out.k[size_t(li)];
    io.v_out = &out.v[size_t(li)];
    io.n_keys = T;
    io.lengths = lengths;
    // The last layer's attention and MLP feed only the logits.
    io.kv_only = !want_logits && li + 1 == c.num_hidden_layers;
    layer_forward(li, x, B, pos, rope, io);
  }
  if (want_logits) {
    auto h = rms_norm(x, norm_, c.rms_norm_eps);
    out.logits = ops::linear_f32(h, lm_head_).view({B, T, c.vocab_size});  // linear() but on a crew
  }
  return out;
}

}  // namespace ucm::model
