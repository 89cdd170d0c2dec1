// Llama-family decoder runner on libtorch (prefill only): produces the post-RoPE K/V
// of every layer (the payload ucm stores) and, optionally, logits.
//
// Supported Hugging Face model directories (config.json + model.safetensors or
// model.safetensors.index.json): model_type "llama", "mistral", "qwen2", "qwen3" with
// hidden_act "silu", RMSNorm, rotate_half RoPE (rope_scaling / rope_parameters null,
// "default", "linear", "llama3"), grouped-query attention, optional q/k/v bias (qwen2, or
// attention_bias=true), qwen3's per-head q/k RMSNorm, optional tied embeddings, mistral's
// sliding_window. docs/model.md lists the families and what each needs.
// The math follows transformers' modeling_llama.py (eager attention) in fp32.
//
// Compute: fp32 on the given device (weights of any float dtype are converted to
// fp32 at load), or bf16 GEMMs with fp32 accumulation (load()'s `compute`). Threads: whatever libtorch/OpenBLAS use (at::get_num_threads());
// nothing global is set, except that forward() runs under c10::InferenceMode.
//
// Memory bound of forward() for tokens [B, T]: besides the weights (~4 bytes per
// parameter) and the returned K/V (2 * L * B * T * n_kv * head_dim elements of
// kv_dtype), the live activations are about B * T * (hidden + (n_heads + 2 n_kv) * head_dim) * 3 floats,
// one MLP block of at most ~2 * kMlpBudget floats (16 MiB) and two attention-score
// blocks of at most kScoreBudget floats (16 MiB each; more only when 16 query rows
// need more, i.e. B * n_heads * T * 16 > kScoreBudget): queries are processed in
// chunks of C = max(16, kScoreBudget / (B * n_heads * T)) rows, so attention memory
// grows as T, not T^2. Logits (if requested) add B * T * vocab floats.
#pragma once

// IValue complete before <torch/torch.h>: Clang 14 in C++20 fails on ATen/core/List.h's
// std::vector<c10::IValue> otherwise (cmake/pch.cmake says why); GCC needs no order.
#include <ATen/core/ivalue.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <tuple>
#include <stdexcept>
#include <string>
#include <vector>

#include "ucm/model/config.h"

namespace ucm::model {

struct LayerKernels;  // pipelines/model/layer_kernels.h

class LlamaModel {
 public:
  /// Loads `dir` (config.json + safetensors weights) onto `dev`. Throws ModelError
  /// for a missing directory/file, bad config, missing tensor, or a tensor whose
  /// shape differs from the config (message names tensor, expected and actual shape).
  ///
  /// compute: fp32 (every GEMM in fp32) or bf16 (the GEMMs of the projections, the MLP, the LM
  /// head and attention's q k^T and p v take bf16 inputs with fp32 accumulation, on the CPU's bf16
  /// matrix units through libtorch's oneDNN; norms, RoPE, softmax, SiLU and the residual stream
  /// stay fp32; the weights are held in bf16 only). See docs/model.md, "Compute dtype".
  static std::unique_ptr<LlamaModel> load(const std::string& dir, torch::Device dev = torch::kCPU,
                                          torch::ScalarType compute = torch::kFloat);

  const ModelConfig& config() const { return cfg_; }
  const std::string& dir() const { return dir_; }
  torch::Device device() const { return dev_; }
  /// fp32 or bf16: the dtype of the GEMMs (load()).
  torch::ScalarType compute_dtype() const { return compute_; }

  /// Hex MD5 over the weights as stored: for every tensor in the safetensors
  /// files (all shards), in byte-wise ascending order of name: the name's UTF-8
  /// bytes, one NUL byte, the dtype name as in the header (e.g. "F32"), one NUL
  /// byte, then the tensor's raw data bytes. Computed once at load.
  const std::string& weights_digest() const { return digest_; }

  struct Output {
    std::vector<torch::Tensor> k;  // per layer: kv_dtype [B, T, num_kv_heads, head_dim], post-RoPE
    std::vector<torch::Tensor> v;  // per layer: kv_dtype [B, T, num_kv_heads, head_dim]
    torch::Tensor logits;          // fp32 [B, T, vocab_size] if want_logits, else undefined
  };

  /// Prefill. tokens: int64 [B, T], right-padded; lengths: int64 [B], 1 <= length <= T.
  /// Row b uses positions 0..length[b]-1; outputs at positions >= length[b] are
  /// garbage (causal attention keeps them from affecting valid positions).
  /// T must be <= max_position_embeddings. Token ids must be in [0, vocab_size).
  /// Throws ModelError on bad arguments.
  ///
  /// kv_dtype: the element type of the KV cache attention reads K and V from. fp32 (default)
  /// rounds nothing. bf16 or fp16 round every layer's post-RoPE K and V to it before attention
  /// and return them in that dtype (Output::k, v), like a server whose KV cache is in that dtype:
  /// precompute passes the store's dtype, so the blocks it stores are the K/V that a server's
  /// own prefill (extend() with a cache of that dtype) computes for the same tokens.
  Output forward(const torch::Tensor& tokens, const torch::Tensor& lengths, bool want_logits = false,
                 torch::ScalarType kv_dtype = torch::kFloat) const;

  /// The KV cache of one sequence: per layer, K and V as [capacity, num_kv_heads, head_dim]
  /// tensors of `dtype` (contiguous, on the model's device). Tokens [0, len) are valid. One
  /// block of block_size tokens starting at token i*T is k[l][i*T .. (i+1)*T): one page of a
  /// paged cache in the store's layout (store_v1.md §4.2), so a load writes it in place.
  struct KvCache {
    torch::ScalarType dtype = torch::kBFloat16;
    int64_t len = 0;
    std::vector<torch::Tensor> k, v;
    int64_t capacity() const { return k.empty() ? 0 : k[0].size(0); }
  };
  /// A zero-filled cache for `capacity` tokens.
  KvCache make_cache(int64_t capacity, torch::ScalarType dtype = torch::kBFloat16) const;

  /// Key mask for block-sparse attention, called once per layer by extend() with the layer,
  /// the new tokens' queries q (fp32 [T, num_heads, head_dim], post-RoPE, unscaled) and the key
  /// count S = len + T. It returns a bool [num_kv_heads, S] tensor (true = the KV head may attend to that key; combined
  /// with the causal mask; the softmax renormalises over what is left), or an undefined tensor
  /// for dense attention in that layer. Each query must keep at least one key.
  using KeyMaskFn = std::function<torch::Tensor(int64_t layer, const torch::Tensor& q, int64_t n_keys)>;

  /// Runs tokens (int64 [T], T >= 1) at positions cache->len .. cache->len + T - 1 of the sequence
  /// whose KV cache is *cache: appends their K/V (rounded to cache->dtype) and attends over
  /// the cache (read in its dtype, computed in fp32), then sets cache->len += T. Prefill (T > 1)
  /// and decode (T = 1) are the same call. Returns fp32 logits [T, vocab] when all_logits, else
  /// [1, vocab] for the last token. Throws ModelError when the cache is too small, the tokens are
  /// out of range, or the cache does not fit the model.
  torch::Tensor extend(const torch::Tensor& tokens, KvCache* cache, bool all_logits = false,
                       const KeyMaskFn& mask = {}) const;

  /// CacheBlend's selective recompute (Yao et al., EuroSys 2025, §4.3), the prefill of a prompt
  /// whose cache already holds stored K/V for some tokens (documents loaded from chunks and moved
  /// to their positions, store_v1.md §4.4).
  struct BlendSpec {
    /// [T]: 1 where cache rows hold stored K/V for that token (every layer), 0 where the token
    /// must be computed (free text, a document's tail, blocks that failed to load).
    std::vector<uint8_t> stored;
    /// Layers [0, check_layer) are computed for every token, and the K/V of check_layer (their
    /// stored K/V are replaced); there the stored tokens to recompute in the later layers are
    /// selected, and check_layer's attention and MLP run for the computed tokens only.
    int64_t check_layer = 1;
    /// Selection at check_layer: given the stored and the freshly computed V rows of the stored
    /// tokens, fp32 [n][nkv * hd] (fresh rounded to the cache dtype), and those tokens' prompt
    /// positions (int64 [n], ascending), returns the indices (into those n) to recompute. Empty
    /// function: recompute none. (V alone, as CacheBlend's reference implementation compares;
    /// docs/blend.md measures it against K|V.)
    std::function<std::vector<uint32_t>(const float* stored, const float* fresh, const int64_t* tokens, size_t n,
                                         size_t row)>
        select;
  };
  /// Runs tokens (int64 [T]) at positions 0..T-1 over *cache (cache->len must be 0; rows with
  /// spec.stored hold stored K/V): all tokens through layers 0..check_layer, then only the
  /// computed tokens (not stored, selected, and always the last) through the rest; the other
  /// tokens keep their stored K/V. Sets cache->len = T. Returns fp32 logits [1, vocab] of the
  /// last token; *recomputed (optional) gets the stored tokens that were recomputed. With every
  /// stored token selected (or none stored) the result is extend()'s, bit for bit.
  torch::Tensor blend(const torch::Tensor& tokens, KvCache* cache, const BlendSpec& spec,
                      std::vector<int64_t>* recomputed = nullptr) const;

  /// The attention that tokens (int64 [Q], Q >= 1) at positions cache->len .. cache->len + Q - 1
  /// pay to each key of *cache: fp32 [S] on the CPU (S = cache->len + Q), the softmax
  /// probabilities averaged over the query heads, the Q queries and every layer (so the entries
  /// sum to 1). keep (bool [S], optional): the keys that may be attended; the others get 0 (each
  /// query must keep one key). The tokens run through every layer over the cache as extend()
  /// would (their K/V are written into rows [len, S)) but cache->len is left as it was, so the
  /// cache can still be filled from len. Used by the blend prefill to rank stored tokens by how
  /// much the question attends to them (query-driven selection: ProphetKV, Wang et al. 2026,
  /// arXiv:2602.02579; docs/blend.md). Throws ModelError like extend().
  torch::Tensor key_attention(const torch::Tensor& tokens, KvCache* cache, const torch::Tensor& keep = {}) const;

  /// Default score-block budget (floats) for chunked attention; see the header comment.
  /// 16 MiB keeps the block under glibc's largest mmap threshold (32 MiB), so it is
  /// recycled by malloc instead of being mapped and page-faulted anew for every chunk.
  static constexpr int64_t kScoreBudget = int64_t{1} << 22;
  /// MLP activations are computed in row blocks of max(16, kMlpBudget / (2 * intermediate)) rows.
  static constexpr int64_t kMlpBudget = int64_t{1} << 21;
  /// At most this many query rows (a decode step) attend a KV cache through strided views of it;
  /// more make contiguous copies first (layer_forward()).
  static constexpr int64_t kDecodeRows = 8;
  /// Query rows per attention chunk on the bf16 compute path (layer_forward(): causal key skipping).
  static constexpr int64_t kCausalChunk = 128;
  /// Changes the score-block budget (floats, >= 1; smaller = more, smaller query
  /// chunks, never below 16 rows). Results do not depend on it beyond fp32 rounding.
  void set_score_budget(int64_t floats) { score_budget_ = std::max<int64_t>(1, floats); }
  /// The row of the kernel table its decoder layers run (pipelines/model/layer_kernels.h), chosen
  /// when it loads: "libtorch" (libtorch's ops: CUDA, a head_dim the CPU kernels do not take,
  /// UCM_BF16_KERNELS=0 or UCM_FP32_KERNELS=0, bf16 on a CPU without AVX512-BF16), "avx512_bf16",
  /// "bf16_portable" (UCM_BF16_KERNELS=portable), "fp32_avx512", "fp32_avx2" or "fp32_generic"
  /// (ucm/kernels/cpu/). The CPU rows serve the batched prefill; the fp32 ones also the cached
  /// forward (extend(), blend(), key_attention()) over an fp32 or bf16 cache, so precompute and the
  /// engine compute the same bits; other caches run the libtorch row.
  const char* kernels() const;
  /// Whether kernels() is a bf16 CPU row.
  bool fused_bf16() const;
  /// kernels() when it is an fp32 CPU row, else "".
  std::string fused_fp32() const;
  /// Data-parallel batched prefill on the CPU: forward() splits a batch of B >= 2 sequences into
  /// min(n, B) groups and runs each on its own thread with one libtorch thread (n >= 1; 1 = the
  /// calling thread alone). Sequences do not interact, so the results are the one-thread results
  /// bit for bit. Why: on this project's 2-core machines oneDNN 2.6's bf16 GEMMs with two OpenMP
  /// threads ran 2x slower than with one, while two single-threaded prefills side by side each
  /// kept one's speed (docs/benchmarks.md, "prefill"); at fp32 each worker's GEMMs run on
  /// OpenBLAS in its own thread (set_blas_threads(1), model_load.cc). With the fused kernels
  /// (fused_bf16(), fused_fp32()) see forward_packed().
  void set_prefill_workers(int n) { prefill_workers_ = std::max(1, n); }
  int prefill_workers() const { return prefill_workers_; }

 private:
  /// Throws ModelError ("LlamaModel::<fn> (dir): ...") unless tokens (int64 [T], T >= 1, ids in
  /// the vocabulary) can be appended to *cache at cache->len: a cache of this model, with room,
  /// within max_position_embeddings. Shared by extend() and key_attention().
  void check_append(const char* fn, const torch::Tensor& tokens, const KvCache* cache) const;
  struct Rope {
    torch::Tensor cos, sin;  // fp32 [A, hd/2]
  };
  /// cos/sin of the positions pos (int64 [A]).
  Rope rope_at(const torch::Tensor& pos) const;
  /// Where a decoder layer's fresh K/V go and what its attention reads: the one decoder layer
  /// (layer_forward) serves the batched prefill (forward(): no cache) and the cached forward
  /// (extend(), blend(), key_attention(): a KvCache).
  using RowsFn = std::function<torch::Tensor(const torch::Tensor& k, const torch::Tensor& v)>;
  using ProbsFn = std::function<void(const torch::Tensor& p)>;
  struct LayerIo {
    /// A cache (batch 1 only): the rows' K/V are written at cache rows pos (rounded to its dtype)
    /// and attention reads keys [0, n_keys) from it, in its dtype.
    KvCache* cache = nullptr;
    /// Without a cache the keys are the rows' own K/V (n_keys = T, positions 0..T-1 per batch row),
    /// rounded to kv_dtype as a KV cache of that dtype would hold them, returned in *k_out / *v_out
    /// as kv_dtype [B, T, nkv, hd] (contiguous).
    torch::ScalarType kv_dtype = torch::kFloat;
    torch::Tensor* k_out = nullptr;
    torch::Tensor* v_out = nullptr;
    int64_t n_keys = 0;  // S: keys [0, S) exist (cache->len + T with a cache, T without)
    /// Without a cache, optional int64 [B]: rows t >= lengths[b] of sequence b are right padding,
    /// whose attention output the fused bf16 kernels leave 0 (their K/V and hidden states are
    /// never read by a real row).
    torch::Tensor lengths;
    /// Stop once the layer's K/V are out: no attention, no MLP (x is left as it was). forward()
    /// sets it on the last layer when no logits are wanted: its output feeds nothing.
    bool kv_only = false;
    KeyMaskFn mask;  // optional (cache only): see KeyMaskFn
    /// Optional (cache only): called with the rows' fresh fp32 K/V [T, nkv, hd] once every row's
    /// K/V is in the cache; when it returns int64 row indices [T'] (T' < T, ascending), attention
    /// and MLP run for those rows only and x becomes their rows [T', H] (blend's check layer).
    RowsFn rows_after_kv;
    /// Optional (cache only): called with each query chunk's attention probabilities, fp32
    /// [nkv, G * n, e] (keys [0, e)), before they weigh the values (key_attention()).
    ProbsFn observe;
  };
  /// The one decoder layer of the model (transformers' LlamaDecoderLayer, eager attention): for
  /// the rows x (fp32 [B * T, H], updated in place) of B sequences at positions pos (int64 [T],
  /// ascending, the same for every sequence; rope: their cos/sin): RMSNorm, q/k/v projection
  /// (project_qkv), K/V out as io says, causal (and sliding-window, and io.mask) attention over
  /// keys [0, io.n_keys), o_proj and the MLP added to x; on the model's row of the kernel table.
  void layer_forward(int64_t li, torch::Tensor& x, int64_t B, const torch::Tensor& pos, const Rope& rope,
                     const LayerIo& io) const;
  /// Writes a layer's fresh K/V (k3, v3: [T, nkv, hd]) into cache rows pos (int64 [T], ascending),
  /// rounded to the cache's dtype; both decoder layers call it.
  void write_cache(KvCache* cache, int64_t li, const torch::Tensor& pos, const torch::Tensor& k3,
                   const torch::Tensor& v3) const;
  struct Layer {
    torch::Tensor ln1, ln2;    // [H]
    torch::Tensor wqkv;        // [(nh + 2 nkv) * hd, H] (q, k, v rows concatenated)
    torch::Tensor bqkv;        // [(nh + 2 nkv) * hd] or undefined
    torch::Tensor q_norm, k_norm;  // [hd] each (qwen3) or undefined
    torch::Tensor wo;          // [H, nh * hd]
    torch::Tensor wgate_up;    // [2 I, H] (gate rows then up rows)
    torch::Tensor wdown;       // [H, I]
  };
  LlamaModel() = default;
  torch::Tensor rope_inv_freq() const;
  /// The one projection of a decoder layer's attention, shared by forward() and the cached
  /// forward (llama_cache.cc): h [B*T, H] fp32 -> q [B, T, nh, hd] and k [B, T, nkv, hd] post-RoPE
  /// (contiguous; qwen3's q/k RMSNorm before RoPE), v [B, T, nkv, hd] (a view of the projection).
  /// cos/sin: [T, hd/2] of the rows' positions.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> project_qkv(const Layer& L, const torch::Tensor& h, int64_t B,
                                                                     int64_t T, const torch::Tensor& cos,
                                                                     const torch::Tensor& sin) const;

  ModelConfig cfg_;
  std::string dir_;
  std::string digest_;
  torch::Device dev_ = torch::kCPU;
  torch::ScalarType compute_ = torch::kFloat;
  torch::Tensor embed_;   // [V, H]
  torch::Tensor lm_head_; // [V, H] (same storage as embed_ when tied)
  torch::Tensor norm_;    // [H]
  torch::Tensor inv_freq_;  // [hd/2] fp32
  std::vector<Layer> layers_;
  int64_t score_budget_ = kScoreBudget;
  /// The row of the kernel table (kernels()); never null once loaded.
  const LayerKernels* kernels_ = nullptr;
  int prefill_workers_ = 1;
  /// forward() of a checked batch on the fused CPU kernels (llama_prefill.cc): each sequence alone
  /// at its own length (no padding rows in the GEMMs), the sequences dealt to the prefill workers
  /// longest first, each to the least loaded. At fp32 the n workers are a crew (crew.h): one whose
  /// sequences are done, or that was dealt none (a batch of fewer than n sequences), takes row
  /// ranges of the others' GEMMs and row kernels and a share of their attention units, with the
  /// same bits. Rows past a sequence's length are 0.
  Output forward_packed(const torch::Tensor& tokens, const torch::Tensor& lengths, bool want_logits,
                        torch::ScalarType kv_dtype) const;
  /// forward() of sequences [b0, b1) of a checked batch, on the calling thread.
  Output forward_rows(const torch::Tensor& tokens, const torch::Tensor& lengths, bool want_logits,
                      torch::ScalarType kv_dtype) const;
};

}  // namespace ucm::model
