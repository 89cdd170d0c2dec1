// pipelines/generate/eval_retrieval.cc: `ucm eval retrieval` (see ucm/generate/eval.h).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "engine.h"
#include "eval_stats.h"
#include "generate_internal.h"
#include "session.h"
#include "sparse.h"
#include "ucm/generate/eval.h"

namespace ucm::generate {

namespace fs = std::filesystem;
using namespace detail;

namespace {

using RetrieverPtr = std::unique_ptr<ucm_retriever_t, void (*)(ucm_retriever_t*)>;

RetrieverPtr make_retriever(const ucm_retriever_params& base, int policy, const ucm_repr_info& info,
                            const std::vector<float>& proj, float tau, Status* st) {
  ucm_retriever_params p = base;
  p.policy = policy;
  p.reuse_steps = 1;
  p.shared_heads = 0;
  p.honor_dense_layers = 0;  // every layer is measured; layers 0 and 1 are reported apart
  if (policy == UCM_POLICY_PSA) {
    p.psa_tau = tau;
    p.top_k = 0;
    p.sparse_ratio = 1.0f;  // PSA stops on its threshold, not on a budget
    p.psa_max_blocks = 0;
  }
  ucm_retriever_t* r = nullptr;
  *st = from_code(ucm_retriever_create(&p, &info, proj.empty() ? nullptr : proj.data(), &r), "ucm_retriever_create");
  return RetrieverPtr(r, ucm_retriever_free);
}

// The documents to evaluate: those given, else every file of the corpus (sorted) that is long
// enough, up to max_documents.
std::vector<fs::path> candidate_files(const EvalRetrievalOptions& o) {
  std::vector<fs::path> files;
  if (!o.documents.empty()) {
    for (const auto& d : o.documents) files.push_back(fs::path(o.corpus) / d);
    return files;
  }
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(o.corpus, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::string n = it->path().filename().string();
    if (n.size() >= o.corpus_suffix.size() && n.compare(n.size() - o.corpus_suffix.size(), std::string::npos,
                                                        o.corpus_suffix) == 0)
      files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

struct PolicyRun {
  std::string name;
  bool psa;
  float tau;
  RetrieverPtr ret;
};

// What every document's evaluation shares: the session, the store's representations, the policies.
struct RetrievalEval {
  RetrievalEval(const EvalRetrievalOptions& opts, Session& s, const StoreClient& st) : o(opts), session(s), store(st) {}
  const EvalRetrievalOptions& o;
  Session& session;
  const StoreClient& store;
  ucm_repr_info info{};
  std::vector<float> proj;
  ucm_retriever_params base{};
  std::vector<int> policies;
  uint32_t T = 0, max_ctx = 0;
  int64_t L = 0, NH = 0, H = 0;
};

// One retriever per policy (PSA: one per threshold tau), fresh for each document.
Status make_runs(const RetrievalEval& e, std::vector<PolicyRun>* runs) {
  for (size_t i = 0; i < e.policies.size(); ++i) {
    const bool psa = e.policies[i] == UCM_POLICY_PSA;
    for (double tau : psa ? e.o.taus : std::vector<double>{0.0}) {
      Status st;
      runs->push_back({e.o.policies[i], psa, float(tau), make_retriever(e.base, e.policies[i], e.info, e.proj, float(tau), &st)});
      UCM_RETURN_IF_ERROR(st);
    }
  }
  return Status::OK();
}

// Query q of layer l against the true attention over the context's n blocks: the oracle's curves,
// then every policy's selections.
Status score_query(const RetrievalEval& e, std::vector<PolicyRun>& runs, const RequestReprs& reprs, const torch::Tensor& K,
                   const torch::Tensor& q, int64_t l, size_t n, EvalStats& stats) {
  const int64_t H = e.H, NH = e.NH, hd = int64_t(e.info.head_dim);
  const double scale = 1.0 / std::sqrt(double(hd));
  // True attention of each query head over the context, summed per block: [NH, n].
  auto qg = q.view({H, NH / H, hd});
  auto sc = torch::bmm(qg, K.permute({1, 2, 0})).mul_(scale);  // [H, G, C]
  auto mass = sc.softmax(-1).view({NH, int64_t(n), int64_t(e.T)}).sum(-1).to(torch::kDouble).contiguous();
  QueryMasses qm(mass.data_ptr<double>(), uint32_t(NH), uint32_t(H), n);
  const auto curves = EvalStats::oracle_curves(qm);
  stats.add_oracle(uint32_t(l), qm, curves);
  for (auto& run : runs) {
    ucm_retrieval_query rq{};
    rq.struct_size = sizeof(rq);
    rq.layer = uint32_t(l);
    rq.q = q.data_ptr<float>();
    rq.q_dtype = UCM_DTYPE_F32;
    rq.n_q_heads = uint32_t(NH);
    rq.group_size = uint32_t(NH / H);
    rq.reprs = &reprs.buffers();
    rq.n_blocks = n;
    auto select = [&](uint32_t k, std::vector<std::vector<uint32_t>>* sets) -> Status {
      rq.top_k = k;
      std::vector<uint32_t> idx(size_t(H) * n);
      std::vector<uint32_t> counts(static_cast<size_t>(H));
      uint32_t n_sets = 0;
      UCM_RETURN_IF_ERROR(from_code(ucm_retriever_select(run.ret.get(), &rq, idx.data(), n, counts.data(), &n_sets),
                                    "ucm_retriever_select"));
      sets->assign(size_t(H), {});
      for (int64_t g = 0; g < H; ++g) {
        const size_t src = n_sets == 1 ? 0 : size_t(g);
        (*sets)[size_t(g)].assign(idx.begin() + std::ptrdiff_t(src * n), idx.begin() + std::ptrdiff_t(src * n + counts[src]));
      }
      return Status::OK();
    };
    UCM_RETURN_IF_ERROR(stats.add_policy(run.name, run.psa, run.tau, uint32_t(l), qm, curves, select));
  }
  return Status::OK();
}

// One document: its context prefilled, the held-out continuation one token at a time (queries
// captured), then every layer's queries scored; a document too short or unreadable is passed over.
Status eval_document(const RetrievalEval& e, const Engine& eng, const fs::path& file, EvalStats& stats,
                     EvalRetrievalResult* out) {
  const EvalRetrievalOptions& o = e.o;
  std::ifstream f(file, std::ios::binary);
  if (!f) return Status::InvalidArgument("cannot read " + file.string());
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<int32_t> ids;
  try {
    ids = prompt_ids(e.session.tokenizer(), o.template_file, ss.str());
  } catch (const std::exception& ex) {
    spdlog::warn("eval retrieval: {}: {}, skipped", file.string(), ex.what());
    return Status::OK();
  }
  if (ids.size() < size_t(o.min_context) + o.queries) return Status::OK();
  const uint32_t T = e.T, C = std::min<uint32_t>(e.max_ctx, uint32_t(ids.size() - o.queries) / T * T);
  if (C < o.min_context) return Status::OK();
  const size_t n = C / T;
  spdlog::info("eval retrieval: {} ({} context tokens, {} blocks)", fs::relative(file, o.corpus).string(), C, n);
  Prefill pre;
  std::vector<int32_t> ctx(ids.begin(), ids.begin() + C);
  UCM_RETURN_IF_ERROR(eng.prefill_recompute(ctx, int64_t(C) + o.queries, &pre));
  std::vector<Hash16> hashes;
  UCM_RETURN_IF_ERROR(e.store.hash_blocks(ctx, T, &hashes));
  size_t hit = 0;
  UCM_RETURN_IF_ERROR(e.store.prefix_blocks(hashes, &hit));
  if (hit < n) spdlog::warn("eval retrieval: the store holds {} of {} blocks; the rest are computed", hit, n);
  RequestReprs reprs(e.info, e.proj, n);
  UCM_RETURN_IF_ERROR(reprs.fill(e.store, hashes, hit, pre.cache));
  std::vector<std::vector<torch::Tensor>> qs(o.queries);  // [step][layer] -> [NH, D]
  for (uint32_t s = 0; s < o.queries; ++s) {
    auto hook = [&](int64_t, const torch::Tensor& q, int64_t) -> torch::Tensor {
      qs[s].push_back(q.reshape({e.NH, int64_t(e.info.head_dim)}).clone());
      return {};
    };
    (void)e.session.model().extend(to_tensor(ids, C + s, C + s + 1), &pre.cache, false, hook);
  }
  std::vector<PolicyRun> runs;
  UCM_RETURN_IF_ERROR(make_runs(e, &runs));
  for (int64_t l = 0; l < e.L; ++l) {
    auto K = pre.cache.k[size_t(l)].narrow(0, 0, C).to(torch::kFloat);  // [C, H, D]
    for (uint32_t s = 0; s < o.queries; ++s) UCM_RETURN_IF_ERROR(score_query(e, runs, reprs, K, qs[s][size_t(l)], l, n, stats));
  }
  out->documents.push_back(fs::relative(file, o.corpus).string());
  out->contexts.push_back(C);
  out->queries += o.queries;
  return Status::OK();
}

}  // namespace

Status eval_retrieval(const EvalRetrievalOptions& o, EvalRetrievalResult* out) {
  *out = EvalRetrievalResult{};
  if (o.store.empty()) return Status::InvalidArgument("eval retrieval needs --store (a store precomputed from the corpus)");
  if (o.queries < 1) return Status::InvalidArgument("--queries must be >= 1");
  Session session;
  UCM_RETURN_IF_ERROR(session.open(session_options(o)));
  const auto& mc = session.model().config();
  RetrievalEval e(o, session, *session.store());
  UCM_RETURN_IF_ERROR(e.store.repr_info(&e.info));
  UCM_RETURN_IF_ERROR(e.store.r4_projection(e.info, &e.proj));
  e.base = ucm_retriever_default_params();
  if (!o.retrieval_config.empty())
    UCM_RETURN_IF_ERROR(from_code(ucm_retriever_params_load(o.retrieval_config.c_str(), &e.base), "retrieval config"));
  for (const auto& p : o.policies) {
    const int id = policy_of(p);
    if (id < 0) return Status::InvalidArgument("unknown policy '" + p + "' (esa, quest, gsa, psa)");
    e.policies.push_back(id);
  }
  e.T = e.info.block_size;
  e.L = mc.num_hidden_layers, e.NH = mc.num_attention_heads, e.H = e.info.num_kv_heads;
  e.max_ctx = std::min<uint32_t>(o.max_context, uint32_t(mc.max_position_embeddings) - o.queries) / e.T * e.T;
  const Engine eng = session.engine();  // block size T: part of the fingerprint the namespace was found by
  EvalStats stats(o.budgets, o.taus, uint32_t(e.L));
  for (const auto& file : candidate_files(o)) {
    if (out->documents.size() >= o.max_documents) break;
    UCM_RETURN_IF_ERROR(eval_document(e, eng, file, stats, out));
  }
  if (out->documents.empty())
    return Status::InvalidArgument("no document of the corpus has " + std::to_string(o.min_context) + " + " +
                                   std::to_string(o.queries) + " tokens");
  stats.finish(out);
  if (!o.csv.empty()) UCM_RETURN_IF_ERROR(write_csv(*out, o.csv));
  return Status::OK();
}

}  // namespace ucm::generate
