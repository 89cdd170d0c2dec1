// pipelines/model/llama_prefill.cc: LlamaModel::forward_packed, the batched prefill on the fused
// CPU kernels: sequences without their padding, dealt to the prefill workers, which help each
// other as a crew (crew.h).
#include <ATen/Parallel.h>

#include <algorithm>
#include <exception>
#include <thread>
#include <vector>

#include "ucm/model/crew.h"
#include "ucm/model/llama_model.h"
#include "ucm/model/llama_ops.h"

namespace ucm::model {

LlamaModel::Output LlamaModel::forward_packed(const torch::Tensor& tokens, const torch::Tensor& lengths,
                                              bool want_logits, torch::ScalarType kv_dtype) const {
  const auto& c = cfg_;
  const int64_t B = tokens.size(0), T = tokens.size(1);
  auto lc = lengths.cpu();
  const int64_t* len = lc.data_ptr<int64_t>();
  auto run = [&](int64_t b) {  // sequence b alone, at its own length
    return forward_rows(tokens.narrow(0, b, 1).narrow(1, 0, len[b]), lc.narrow(0, b, 1), want_logits, kv_dtype);
  };
  // Every worker is in the crew (crew.h) even where the batch has fewer sequences: one whose
  // sequences are done (or that was dealt none) takes parts of the others' GEMMs, attention and
  // row kernels (the fused ops of both compute dtypes share: forward() comes here only with them).
  const int64_t W = prefill_workers_;
  const bool whole = B == 1 && len[0] == T;  // the one sequence's output is the batch's
  if (W <= 1 && whole) return forward_rows(tokens, lc, want_logits, kv_dtype);
  Output out;
  if (!whole) {
    const auto kv_opt = torch::TensorOptions().dtype(kv_dtype).device(dev_);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      out.k.push_back(torch::zeros({B, T, c.num_key_value_heads, c.head_dim}, kv_opt));
      out.v.push_back(torch::zeros({B, T, c.num_key_value_heads, c.head_dim}, kv_opt));
    }
    if (want_logits) out.logits = torch::zeros({B, T, c.vocab_size}, torch::TensorOptions().device(dev_));
  }
  auto place = [&](int64_t b, const Output& o) {
    if (whole) {
      out = o;
      return;
    }
    for (size_t l = 0; l < out.k.size(); ++l) {
      out.k[l][b].narrow(0, 0, len[b]).copy_(o.k[l][0]);
      out.v[l][b].narrow(0, 0, len[b]).copy_(o.v[l][0]);
    }
    if (want_logits) out.logits[b].narrow(0, 0, len[b]).copy_(o.logits[0]);
  };
  if (W <= 1) {
    for (int64_t b = 0; b < B; ++b) place(b, run(b));
    return out;
  }
  // Longest first, each to the least loaded of the first min(W, B) workers (load: its tokens).
  std::vector<int64_t> order(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) order[size_t(b)] = b;
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return len[x] > len[y]; });
  std::vector<std::vector<int64_t>> mine(static_cast<size_t>(W));
  std::vector<int64_t> load(static_cast<size_t>(std::min(W, B)), 0);
  for (int64_t b : order) {
    const size_t w = size_t(std::min_element(load.begin(), load.end()) - load.begin());
    mine[w].push_back(b);
    load[w] += len[b];
  }
  Crew crew(static_cast<int>(W));
  std::vector<std::exception_ptr> err(static_cast<size_t>(W));
  std::vector<std::thread> pool;
  for (int64_t w = 0; w < W; ++w) {
    pool.emplace_back([&, w] {
      c10::InferenceMode guard;  // also while helping: the parts write inference tensors
      try {
        at::set_num_threads(1);  // this thread's OpenMP threads
        CrewMember member(&crew);
        if (crew_strict() && !mine[size_t(w)].empty()) crew.wait_for_idle(int(W - std::min(W, B)));
        for (int64_t b : mine[size_t(w)]) place(b, run(b));
      } catch (...) {
        err[size_t(w)] = std::current_exception();
      }
      crew.help_until_done();
    });
  }
  for (auto& t : pool) t.join();
  for (auto& e : err)
    if (e) std::rethrow_exception(e);
  return out;
}

}  // namespace ucm::model
