// pipelines/precompute/bench.cc: `ucm bench precompute`: bare prefill against a full precompute
// of the same batches (precompute.h, docs/benchmarks.md).
#include <unistd.h>

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>

#include "ucm/model/compute.h"
#include "compute_report.h"
#include "precompute_internal.h"
#include "ucm/model/llama_model.h"
#include "ucm/tok/tokenizer.h"
#include "ucm/fs.h"

namespace ucm::precompute {

namespace fs = std::filesystem;
using namespace detail;

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
// The best of 10 products [2048, k] x [k, n] at dtype on every core, GFLOP/s (BenchResult's
// matmul_limit_gflops); the threads in effect are restored.
double matmul_limit_gflops(int64_t k, int64_t n, torch::ScalarType dtype) {
  c10::InferenceMode guard;
  const int cores = model::usable_cores(), was = at::get_num_threads(), blas_was = model::blas_threads();
  at::set_num_threads(cores);
  model::set_blas_threads(cores);
  auto a = torch::randn({2048, k}).to(dtype), b = torch::randn({n, k}).to(dtype);
  auto c = torch::mm(a, b.t());  // warm-up
  double best = 0;
  for (int i = 0; i < 10; ++i) {
    auto t0 = Clock::now();
    torch::mm_out(c, a, b.t());
    best = std::max(best, 2.0 * 2048 * double(k) * double(n) / 1e9 / secs_since(t0));
  }
  at::set_num_threads(was);
  if (blas_was > 0) model::set_blas_threads(blas_was);
  return best;
}

using DocBatch = std::vector<std::vector<int32_t>*>;

// The documents precompute would store, as token ids: same reading, template and truncation.
Status read_documents(const PrecomputeOptions& o, const tok::Tokenizer* tk, uint64_t max_tokens, uint64_t docs,
                      std::vector<std::vector<int32_t>>* all) {
  std::unique_ptr<DocSource> src;
  Status st = open_doc_source(source_options(o), &src);
  if (!st.ok()) return st;
  uint64_t seen = 0;
  while (seen < docs) {
    SourceDoc d;
    SkippedEntry skipped;
    Status rs;
    auto r = src->next(&d, &skipped, &rs);
    if (r == DocSource::Result::kEnd) {
      if (!rs.ok()) return rs;
      break;
    }
    if (r == DocSource::Result::kSkipped) continue;
    ++seen;
    std::vector<int32_t> ids;
    if (d.has_token_ids) {
      ids = d.token_ids;  // a token-ids corpus (docs/corpus.md): stored as given, as precompute does
    } else {
      if (d.text.find_first_not_of(" \t\r\n\f\v") == std::string::npos) continue;
      try {
        ids = tk->encode(src->prefix() + d.text + src->suffix());
      } catch (const tok::TokenizerError&) {
        continue;
      }
    }
    if (ids.size() > max_tokens) ids.resize(max_tokens);
    ids.resize(ids.size() - ids.size() % o.fingerprint.block_size);
    if (!ids.empty()) all->push_back(std::move(ids));
  }
  if (all->empty()) return Status::InvalidArgument("bench: no document of at least one block in " + o.corpus);
  return Status::OK();
}

// Packs per sort window exactly as the pipeline does.
std::vector<DocBatch> pack_batches(const PrecomputeOptions& o, std::vector<std::vector<int32_t>>& all) {
  std::vector<DocBatch> batches;
  const uint64_t budget = uint64_t(std::max<uint32_t>(1, o.sort_window_batches)) * o.batch_tokens;
  size_t i = 0;
  while (i < all.size()) {
    DocBatch win;
    uint64_t tok = 0;
    while (i < all.size() && tok < budget) {
      tok += all[i].size();
      win.push_back(&all[i++]);
    }
    std::stable_sort(win.begin(), win.end(), [](auto* a, auto* b) { return a->size() > b->size(); });
    DocBatch cur;
    size_t T = 0;
    for (auto* w : win) {
      if (!cur.empty() && (cur.size() + 1) * std::max(T, w->size()) > o.batch_tokens) {
        batches.push_back(std::move(cur));
        cur.clear();
        T = 0;
      }
      T = std::max(T, w->size());
      cur.push_back(w);
    }
    if (!cur.empty()) batches.push_back(std::move(cur));
  }
  return batches;
}

// The bare prefill of every batch. It rounds K/V to the store dtype as precompute's does
// (LlamaModel::forward). On a GPU forward() only enqueues: a timed run ends when the device is
// done (bare prefill leaves K/V in device memory; precompute's copies to the host are part of its
// cost).
class BarePrefill {
 public:
  BarePrefill(const model::LlamaModel* m, DType dtype, const std::vector<DocBatch>& batches)
      : m_(m), batches_(batches),
        kv_dtype_(dtype == DType::kBF16 ? torch::kBFloat16 : dtype == DType::kFP16 ? torch::kHalf : torch::kFloat) {}
  // Warm-up on the first (largest) batch, not timed: first-call allocations, and glibc's dynamic
  // mmap threshold rises once the large buffers have been freed (later runs reuse heap memory
  // instead of page-faulting fresh mappings), so all timed runs start from the same state.
  void warm_up() const {
    run(batches_.front());
    sync();
  }
  double time() const {
    auto t0 = Clock::now();
    for (auto& b : batches_) run(b);
    sync();
    return secs_since(t0);
  }

 private:
  void run(const DocBatch& b) const {
    size_t T = 0;
    for (auto* w : b) T = std::max(T, w->size());
    auto tokens = torch::zeros({int64_t(b.size()), int64_t(T)}, torch::kInt64);
    auto lengths = torch::empty({int64_t(b.size())}, torch::kInt64);
    for (size_t i = 0; i < b.size(); ++i) {
      for (size_t t = 0; t < b[i]->size(); ++t) tokens.data_ptr<int64_t>()[i * T + t] = (*b[i])[t];
      lengths.data_ptr<int64_t>()[i] = int64_t(b[i]->size());
    }
    (void)m_->forward(tokens, lengths, false, kv_dtype_);
  }
  void sync() const {
    if (m_->device().is_cuda()) torch::cuda::synchronize();
  }
  const model::LlamaModel* m_;
  const std::vector<DocBatch>& batches_;
  const torch::ScalarType kv_dtype_;
};

// One full precompute into a temporary store; its summary.
Status full_precompute(PrecomputeOptions o, const model::LlamaModel* m, const tok::Tokenizer* tk, uint64_t tokens,
                       PrecomputeSummary* sum) {
  fs::path tmp = fs::temp_directory_path() /
                 ("ucm-bench-precompute-" + std::to_string(::getpid()) + "-" + std::to_string(now_ms()));
  o.store = tmp.string();
  o.fingerprint.namespace_name.clear();
  Status st = run_precompute(o, Resources{m, tk}, sum);
  std::error_code ec;
  ucm::remove_tree(tmp, ec);
  if (!st.ok()) return st;
  if (sum->tokens != tokens)
    return Status::Internal("bench: precompute stored " + std::to_string(sum->tokens) + " tokens, prefill ran " +
                            std::to_string(tokens));
  return Status::OK();
}

// Medians of both sides and their ratio: on a shared machine one round's ratio moves by +-15%
// (2026-11-27: 0.80 to 1.13 over 7 rounds of one run), and the median of each side outlasts it.
void summarize(const std::vector<double>& bare, const std::vector<double>& full,
               const std::vector<double>& full_prefill, BenchResult* out) {
  out->prefill_seconds_before = bare.front();
  out->prefill_seconds_after = bare.back();
  out->prefill_seconds = median(bare);
  out->prefill_tokens_per_second = double(out->tokens) / out->prefill_seconds;
  out->precompute_seconds = median(full);
  out->precompute_tokens_per_second = out->precompute_seconds > 0 ? double(out->tokens) / out->precompute_seconds : 0;
  // The forward time of the full run whose seconds are the median (the lower middle one).
  std::vector<size_t> idx(full.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return full[a] < full[b]; });
  out->precompute_prefill_seconds = full_prefill[idx[(idx.size() - 1) / 2]];
  out->ratio = out->prefill_tokens_per_second > 0 ? out->precompute_tokens_per_second / out->prefill_tokens_per_second : 0;
}

// GEMM work of the bare prefill and its rate against the machine's matmul limit.
void gemm_figures(const model::LlamaModel* m, const std::vector<DocBatch>& batches, bool packed, BenchResult* out) {
  const auto& c = m->config();
  for (auto& b : batches) {
    size_t T = 0, n = 0;
    for (auto* w : b) {
      T = std::max(T, w->size());
      n += w->size();
    }
    out->gemm_tokens += uint64_t(packed ? n : b.size() * T);
  }
  const double H = double(c.hidden_size), I = double(c.intermediate_size), hd = double(c.head_dim);
  const double qkv = H * hd * double(c.num_attention_heads + 2 * c.num_key_value_heads);
  const double layer = qkv + hd * double(c.num_attention_heads) * H + 3 * H * I;
  const double weights = double(c.num_hidden_layers - 1) * layer + qkv;  // the last layer: K/V only
  out->gemm_gflop = 2 * weights * double(out->gemm_tokens) / 1e9;
  out->gemm_gflops = out->prefill_seconds > 0 ? out->gemm_gflop / out->prefill_seconds : 0;
  if (m->device().is_cpu()) {
    out->matmul_limit_gflops = matmul_limit_gflops(c.hidden_size, 2 * c.intermediate_size, m->compute_dtype());
    out->limit_ratio = out->matmul_limit_gflops > 0 ? out->gemm_gflops / out->matmul_limit_gflops : 0;
  }
}

}  // namespace

Status bench_precompute(const PrecomputeOptions& o_in, uint64_t docs, BenchResult* out, int rounds) {
  *out = BenchResult{};
  if (rounds < 1) return Status::InvalidArgument("bench: rounds must be at least 1, got " + std::to_string(rounds));
  out->rounds = rounds;
  PrecomputeOptions o = o_in;
  o.limit = docs;
  o.resume = false;
  o.progress = false;
  Status st = validate(o);
  if (!st.ok()) return st;
  std::unique_ptr<model::LlamaModel> model_owned;
  const model::LlamaModel* m = nullptr;
  ComputeInfo compute;
  st = load_model(o, Resources{}, &model_owned, &m, &compute);
  if (!st.ok()) return st;
  set_compute(compute, out);
  std::unique_ptr<tok::Tokenizer> tok_owned;
  const tok::Tokenizer* tk = nullptr;
  st = load_tokenizer(o, Resources{}, &tok_owned, &tk);
  if (!st.ok()) return st;

  const auto& c = m->config();
  uint64_t max_tokens = o.max_doc_tokens ? std::min<uint64_t>(o.max_doc_tokens, c.max_position_embeddings)
                                         : uint64_t(c.max_position_embeddings);
  max_tokens -= max_tokens % o.fingerprint.block_size;
  std::vector<std::vector<int32_t>> all;
  st = read_documents(o, tk, max_tokens, docs, &all);
  if (!st.ok()) return st;
  const std::vector<DocBatch> batches = pack_batches(o, all);
  out->device = m->device().str();
  BarePrefill bare_prefill(m, payload_dtype(o), batches);
  bare_prefill.warm_up();
  // Bare prefill is timed before and after each full precompute (A B A, A B A B A with 2 rounds):
  // on a shared machine the load drifts, and the mean of the two brackets the precompute run in
  // time.
  std::vector<double> bare = {bare_prefill.time()};
  for (auto& a : all) out->tokens += a.size();
  out->documents = all.size();
  out->batches = batches.size();
  std::vector<double> full, full_prefill;
  for (int r = 0; r < rounds; ++r) {
    PrecomputeSummary sum;
    st = full_precompute(o, m, tk, out->tokens, &sum);
    if (!st.ok()) return st;
    full.push_back(sum.seconds);
    full_prefill.push_back(sum.prefill_seconds);
    bare.push_back(bare_prefill.time());
    // Throughputs over the same tokens: the ratio of rates is the inverse ratio of seconds.
    out->ratios.push_back(sum.seconds > 0 ? (bare[size_t(r)] + bare[size_t(r) + 1]) / 2 / sum.seconds : 0);
  }
  summarize(bare, full, full_prefill, out);
  const bool packed = m->device().is_cpu() && compute.kernels != "libtorch";  // LlamaModel::forward_packed
  gemm_figures(m, batches, packed, out);
  return Status::OK();
}

}  // namespace ucm::precompute
