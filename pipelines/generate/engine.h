// pipelines/generate/engine.h: prefill (from the store's cached prefix, or full recompute),
// greedy decode and the online write path of the reference engine.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "ucm/model/llama_model.h"
#include "store_client.h"
#include "ucm/status.h"

namespace ucm::generate {

using KvCache = model::LlamaModel::KvCache;

/// One prefilled sequence.
struct Prefill {
  KvCache cache;          ///< tokens [0, cache.len) = the prompt
  torch::Tensor logits;   ///< fp32 [vocab]: the next-token logits after the prompt
  std::vector<Hash16> hashes;  ///< the prompt's full blocks
  uint64_t hit_blocks = 0;     ///< leading blocks present in the store (lookup)
  uint64_t used_blocks = 0;    ///< leading blocks taken from the store (loaded and verified)
  uint64_t failed_blocks = 0;  ///< blocks whose load failed (they and the rest are recomputed)
  double ttft_ms = 0, load_ms = 0, prefill_ms = 0;  ///< wall times (ttft: hashing to first token)
};

/// Greedy decode output.
struct Decode {
  std::vector<int32_t> tokens;        ///< generated tokens (the first comes from the prefill logits)
  std::vector<torch::Tensor> logits;  ///< fp32 [vocab] per token, when kept
  double decode_seconds = 0;          ///< time of the decode steps (after the first token)
};

class Engine {
 public:
  /// store may be null (recompute only). dtype: the KV cache element type (namespace dtype).
  Engine(const model::LlamaModel& m, const StoreClient* store, uint32_t block_size, torch::ScalarType dtype)
      : m_(m), store_(store), bs_(block_size), dtype_(dtype) {}

  /// Prefix from the store, then the rest prefilled. capacity: tokens the cache must hold.
  Status prefill_cached(const std::vector<int32_t>& ids, int64_t capacity, Prefill* out) const;
  /// Every prompt token prefilled.
  Status prefill_recompute(const std::vector<int32_t>& ids, int64_t capacity, Prefill* out) const;

  /// Decodes n tokens greedily from p (its cache grows). teacher (optional): feed teacher[i]
  /// instead of the argmax at step i (teacher forcing; tokens still records the argmaxes).
  /// eos >= 0 stops after that token (not with a teacher). mask: block-sparse attention hook.
  void decode(Prefill* p, uint32_t n, int64_t eos, const std::vector<int32_t>* teacher,
              const model::LlamaModel::KeyMaskFn& mask, bool keep_logits, Decode* out) const;

  /// Online write path: dumps the full blocks of `tokens` (whose K/V are cache[0, len)) that
  /// the store does not hold yet. *saved = blocks dumped.
  Status save(const std::vector<int32_t>& tokens, const KvCache& cache, uint64_t* saved) const;

  uint32_t block_size() const { return bs_; }
  torch::ScalarType dtype() const { return dtype_; }
  const model::LlamaModel& model() const { return m_; }

 private:
  const model::LlamaModel& m_;
  const StoreClient* store_;
  uint32_t bs_;
  torch::ScalarType dtype_;
};

/// Pointers to the first n_blocks pages of `cache` in ucm_store_load's UCM_DEST_PAGED order:
/// ptrs[(i * L + l) * 2 + kv] -> rows [i * T, (i + 1) * T) of layer l's K (kv 0) or V (kv 1).
std::vector<void*> page_ptrs(const KvCache& cache, size_t n_blocks, uint32_t block_size);

/// How a decode compares with a reference decode fed the same tokens (teacher forcing), step
/// by step: the share of steps whose argmax equals the reference's, and the mean KL(ref || test)
/// of the next-token distributions (nats). Both decodes must have kept their logits.
struct Agreement {
  uint64_t steps = 0;
  double top1_agreement = 0, mean_kl = 0;
};
/// Steps [from, n) are compared.
Agreement compare_decodes(const Decode& ref, const Decode& test, size_t from = 0);
/// Length of the common prefix of a and b.
uint64_t greedy_match(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

/// Token ids as an int64 tensor.
torch::Tensor to_tensor(const std::vector<int32_t>& ids, size_t begin, size_t end);

}  // namespace ucm::generate
