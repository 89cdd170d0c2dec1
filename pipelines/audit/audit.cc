// pipelines/audit/audit.cc: `ucm inspect --audit` (see ucm/audit/audit.h).
//
// For each drawn block: its chain's token ids from the store (Store::chain_tokens, one header page
// per block), one prefill of them with the model (K/V rounded to the namespace dtype, as precompute
// stores them), then every block of the chain not audited yet is loaded and compared slice by
// slice ((layer, K|V), [T][H][D]): deviation = max over its tokens t of ||stored_t - recomputed_t||
// / RMS_t ||recomputed_t|| (each token's [H][D] vector).
#include "ucm/audit/audit.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <set>
#include <unordered_map>

#include "ucm/model/fingerprint.h"
#include "ucm/model/llama_model.h"
#include "ucm/model/model_load.h"
#include "ucm/admin.h"
#include "ucm/hash.h"
#include "ucm/namespace_match.h"
#include "ucm/store.h"

namespace ucm::audit {

double default_tolerance(const std::string&) {
  // An honest block differs from its fp32 recomputation by the storage rounding (bf16: ~2^-9) plus
  // the writer's compute path (batch shape, kernels, and above all its compute dtype: a writer
  // computing in bf16 reached 0.139 on 3,175 blocks; fp32 writers 1.3e-5). KV of other tokens:
  // >= 1.6, and 0.24 for a block with one wrong token of 16. Measured: docs/reliability.md.
  return 0.2;
}

namespace {

using Clock = std::chrono::steady_clock;

torch::ScalarType torch_dtype(DType d) {
  return d == DType::kBF16 ? torch::kBFloat16 : d == DType::kFP16 ? torch::kHalf : torch::kFloat;
}

struct Progress {
  std::function<void(const std::string&)> fn;
  Clock::time_point last{};
  void tick(const std::function<std::string()>& line, bool force = false) {
    if (!fn) return;
    const auto now = Clock::now();
    if (!force && now - last < std::chrono::seconds(1)) return;
    last = now;
    fn(line());
  }
};

Status pick_namespace(Store* s, const std::string& want, NamespaceDesc* d, NamespaceId* id) {
  if (!want.empty()) return s->find_namespace(want, d, id);
  auto all = s->namespaces();
  if (all.size() == 1) {
    *d = all[0];
    *id = all[0].id();
    return Status::OK();
  }
  std::string names;
  for (const auto& n : all) names += " " + n.display_name();
  return Status::InvalidArgument(all.empty() ? "the store has no namespace to audit"
                                             : "the store has " + std::to_string(all.size()) +
                                                   " namespaces; pick one with --namespace:" + names);
}

// The model of namespace d, refused when its digest or geometry differ (every block would look
// poisoned).
Status load_checked_model(const AuditOptions& o, const NamespaceDesc& d, std::unique_ptr<model::LlamaModel>* m,
                          AuditReport* r) {
  model::LoadOptions lo;
  lo.model_dir = o.model_dir;
  lo.device = o.device;
  lo.compute_dtype = o.compute_dtype;
  lo.threads = o.threads;
  model::ComputeInfo ci;
  Status st = model::load_model(lo, m, &ci);
  if (!st.ok()) return st;
  r->compute_dtype = ci.dtype;
  r->compute_path = ci.path;
  // The model's fingerprint in the namespace's dtype and block size, by the one rule
  // (store_v1.md §7.3; ucm/namespace_match.h): another model's KV would make every block look poisoned.
  model::FingerprintOptions fp;
  fp.dtype = dtype_name(d.dtype);
  fp.block_size = d.block_size;
  NamespaceDesc want;
  UCM_RETURN_IF_ERROR(NamespaceDesc::from_json(model::namespace_desc_json(**m, fp), &want));
  want.hash_scheme = d.hash_scheme;
  const std::string why = namespace_mismatch(d, want, 0);
  if (!why.empty())
    return Status::InvalidArgument("--model " + o.model_dir + " is not namespace " + d.display_name() +
                                   "'s model (" + why + "): every block would look poisoned");
  return Status::OK();
}

// Draws the blocks: a uniform reservoir over the index (or all of them, chain ends first: one
// prefill each then covers every block before them).
Status draw_blocks(Store& store, const NamespaceId& ns, const AuditOptions& o, std::vector<BlockHash>* drawn,
                   AuditReport* r) {
  std::set<BlockHash> parents;  // --all: the blocks that have a child
  std::mt19937_64 rng(o.seed);
  uint64_t seen = 0;
  Status st = store.for_each_block(ns, [&](const BlockHash& h, const BlockInfo& bi) {
    ++seen;
    if (o.all) parents.insert(bi.parent);
    if (o.all || drawn->size() < o.sample) drawn->push_back(h);
    else if (const uint64_t k = rng() % seen; k < o.sample) (*drawn)[k] = h;
    return true;
  });
  if (!st.ok()) return st;
  r->blocks_in_namespace = seen;
  r->sampled = drawn->size();
  std::sort(drawn->begin(), drawn->end());
  drawn->erase(std::unique(drawn->begin(), drawn->end()), drawn->end());  // a block in two shards
  if (o.all)
    std::stable_partition(drawn->begin(), drawn->end(), [&](const BlockHash& h) { return !parents.count(h); });
  return Status::OK();
}

// Audits chains: one prefill per chain, then its blocks not audited yet, compared slice by slice.
class ChainAuditor {
 public:
  ChainAuditor(Store& store, const NamespaceId& ns, const NamespaceDesc& d, const model::LlamaModel& m, AuditReport* r)
      : store_(store), ns_(ns), d_(d), m_(m), r_(r), kv_dtype_(torch_dtype(d.dtype)), root_(root_hash(d.hash_seed())) {}
  Status audit_chain_of(const BlockHash& h);

 private:
  Status prefill(const std::vector<uint32_t>& ids, model::LlamaModel::Output* out);
  void compare(const BlockHash& h, size_t j, const uint8_t* stored_bytes, const model::LlamaModel::Output& out);

  Store& store_;
  const NamespaceId& ns_;
  const NamespaceDesc& d_;
  const model::LlamaModel& m_;
  AuditReport* r_;
  const torch::ScalarType kv_dtype_;
  const BlockHash root_;
  std::set<BlockHash> done_;
  std::string payload_;  // the loaded payloads of one chain
  bool have_poisoned_dev_ = false;
};

// One prefill of the whole chain; K/V in the namespace dtype.
Status ChainAuditor::prefill(const std::vector<uint32_t>& ids, model::LlamaModel::Output* out) {
  torch::Tensor tokens = torch::empty({1, int64_t(ids.size())}, torch::kInt64);
  for (size_t i = 0; i < ids.size(); ++i) tokens.data_ptr<int64_t>()[i] = int64_t(ids[i]);
  torch::Tensor lengths = torch::full({1}, int64_t(ids.size()), torch::kInt64);
  try {
    *out = m_.forward(tokens.to(m_.device()), lengths.to(m_.device()), false, kv_dtype_);
  } catch (const std::exception& e) {
    return Status::Internal(std::string("audit prefill: ") + e.what());
  }
  ++r_->chains;
  r_->tokens_recomputed += ids.size();
  return Status::OK();
}

// Block j of the chain: stored [L][2][T][H][D] against the recomputed out.k[l] / out.v[l] [1, n, H, D].
void ChainAuditor::compare(const BlockHash& h, size_t j, const uint8_t* stored_bytes,
                           const model::LlamaModel::Output& out) {
  const size_t T = d_.block_size, H = d_.num_kv_heads, D = d_.head_dim, L = d_.num_layers;
  torch::Tensor stored = torch::from_blob(const_cast<uint8_t*>(stored_bytes),
                                          {int64_t(L), 2, int64_t(T), int64_t(H), int64_t(D)}, kv_dtype_)
                             .to(torch::kFloat);
  double worst = 0;
  int bad_layer = -1;
  const char* bad_kv = "K";
  for (size_t l = 0; l < L; ++l)
    for (int kv = 0; kv < 2; ++kv) {
      torch::Tensor ref =
          (kv ? out.v[l] : out.k[l])[0].narrow(0, int64_t(j * T), int64_t(T)).to(torch::kCPU).to(torch::kFloat);
      // Per token: ||stored_t - recomputed_t|| over its [H][D], the largest of the block's T
      // tokens, relative to the RMS of the recomputed tokens' norms (a token of tiny norm, such
      // as some V rows, must not blow its own ratio up). A writer's compute path moves single elements by up to ~17%
      // of the slice's largest (bf16 compute, measured) but a token's vector by a few %; one
      // wrong token of 16 moves its own vector by ~100% (the whole slice's norm only by ~12%).
      const torch::Tensor diff = (stored[int64_t(l)][kv] - ref).flatten(1).norm(2, {1});
      const double rms = std::max(ref.norm().item<double>() / std::sqrt(double(T)), 1e-12);
      const double dev = diff.max().item<double>() / rms;
      if ((std::isnan(dev) || dev > r_->tolerance) && bad_layer < 0) {
        bad_layer = int(l);
        bad_kv = kv ? "V" : "K";
      }
      worst = std::isnan(dev) ? INFINITY : std::max(worst, dev);
    }
  if (bad_layer < 0) {
    ++r_->honest;
    r_->max_honest_deviation = std::max(r_->max_honest_deviation, worst);
    return;
  }
  ++r_->poisoned_total;
  r_->min_poisoned_deviation = have_poisoned_dev_ ? std::min(r_->min_poisoned_deviation, worst) : worst;
  have_poisoned_dev_ = true;
  if (r_->poisoned.size() < 1000) r_->poisoned.push_back({to_hex(h), j, uint32_t(bad_layer), bad_kv, worst});
}

Status ChainAuditor::audit_chain_of(const BlockHash& h) {
  if (done_.count(h)) return Status::OK();
  std::vector<uint32_t> ids;
  size_t nb = 0;
  Status cs = store_.chain_tokens(ns_, h, &ids, &nb);
  if (cs.code() == Code::kNotSupported) {
    ++r_->tokens_unknown;
    return Status::OK();
  }
  if (cs.code() == Code::kNotFound) {
    ++r_->missing;
    return Status::OK();
  }
  if (!cs.ok()) return cs;
  std::vector<BlockHash> chain;
  hash_blocks(root_, ids.data(), ids.size(), d_.block_size, &chain);
  if (chain.size() != nb || chain.back() != h)
    return Status::Corruption("block " + to_hex(h) + ": the token ids of its chain do not hash to it (a record's "
                              "ids or parent are wrong; run `ucm inspect --verify`)");
  model::LlamaModel::Output out;
  Status st = prefill(ids, &out);
  if (!st.ok()) return st;
  // The chain's blocks not audited yet, loaded in one task.
  std::vector<size_t> wanted;
  for (size_t j = 0; j < nb; ++j)
    if (done_.insert(chain[j]).second) wanted.push_back(j);
  std::vector<BlockHash> want;
  for (size_t j : wanted) want.push_back(chain[j]);
  const size_t pb = d_.payload_bytes();
  payload_.resize(wanted.size() * pb);
  LoadDest dest;
  dest.kind = LoadDest::Kind::kContiguous;
  for (size_t k = 0; k < wanted.size(); ++k) dest.ptrs.push_back(payload_.data() + k * pb);
  auto task = store_.load(ns_, want.data(), want.size(), dest);
  (void)task->wait();  // per-block results below
  for (size_t k = 0; k < wanted.size(); ++k) {
    if (!task->block_status()[k].ok()) {
      ++r_->load_errors;
      continue;
    }
    ++r_->audited;
    compare(chain[wanted[k]], wanted[k], reinterpret_cast<const uint8_t*>(payload_.data() + k * pb), out);
  }
  return Status::OK();
}

// --fix: gc removes the poisoned blocks (through a live writer when one runs), every block chained
// after them, and the documents that lose a block, so that `precompute --resume` recomputes those.
Status fix_poisoned(const AuditOptions& o, const NamespaceId& ns, AuditReport* r) {
  admin::GcOptions go;
  for (const auto& p : r->poisoned) {
    BlockHash b{};
    (void)parse_hex16(p.block_hex, &b);
    go.remove.emplace_back(ns, b);
  }
  go.progress = o.progress;
  admin::GcReport gr;
  Status st = admin::gc(o.store, go, &gr);
  if (!st.ok()) return Status(st.code(), "audit --fix: gc: " + st.message());
  r->fixed = true;
  r->fix_blocks_removed = gr.corrupt_removed + gr.orphans_removed;
  r->fix_documents_removed = gr.documents_removed;
  r->fix_message = "removed " + std::to_string(gr.corrupt_removed) + " poisoned block(s), " +
                   std::to_string(gr.orphans_removed) + " block(s) chained after them and " +
                   std::to_string(gr.documents_removed) + " document(s) (recomputed by `ucm precompute --resume`)";
  if (r->poisoned_total > r->poisoned.size())
    r->fix_message += "; " + std::to_string(r->poisoned_total - r->poisoned.size()) +
                      " more poisoned block(s) were not listed: run the audit again";
  return Status::OK();
}

}  // namespace

Status run_audit(const AuditOptions& o, AuditReport* r) {
  *r = AuditReport();
  const auto t0 = Clock::now();
  Progress prog{o.progress};
  r->store = o.store;
  if (o.model_dir.empty()) return Status::InvalidArgument("--audit needs --model DIR: the namespace's model");
  OpenOptions oo;  // read-only: safe beside a live writer
  std::unique_ptr<Store> store;
  Status st = Store::Open(o.store, oo, &store);
  if (!st.ok()) return st;
  NamespaceDesc d;
  NamespaceId ns{};
  st = pick_namespace(store.get(), o.ns, &d, &ns);
  if (!st.ok()) return st;
  r->ns_name = d.display_name();
  r->ns_hex = to_hex(ns);
  r->dtype = dtype_name(d.dtype);
  r->tolerance = o.tolerance > 0 ? o.tolerance : default_tolerance(r->dtype);
  std::unique_ptr<model::LlamaModel> m;
  st = load_checked_model(o, d, &m, r);
  if (!st.ok()) return st;
  std::vector<BlockHash> drawn;
  st = draw_blocks(*store, ns, o, &drawn, r);
  if (!st.ok()) return st;
  {
    ChainAuditor auditor(*store, ns, d, *m, r);
    size_t k = 0;
    for (const BlockHash& h : drawn) {
      ++k;
      prog.tick([&] {
        return "audit: " + std::to_string(k) + "/" + std::to_string(drawn.size()) + " drawn blocks, " +
               std::to_string(r->audited) + " audited, " + std::to_string(r->poisoned_total) + " poisoned";
      });
      st = auditor.audit_chain_of(h);
      if (!st.ok()) return st;
    }
  }
  r->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  prog.tick([&] {
    return "audit: done, " + std::to_string(r->audited) + " blocks audited, " + std::to_string(r->poisoned_total) +
           " poisoned";
  }, true);
  if (r->poisoned_total == 0) return Status::OK();
  if (!o.fix)
    return Status::Corruption(std::to_string(r->poisoned_total) + " block(s) hold KV that is not the KV of their "
                              "tokens (valid checksums; written by a server that never computed it?): remove them "
                              "with `ucm inspect " + o.store + " --audit --fix`, or `ucm gc`");
  store.reset();
  return fix_poisoned(o, ns, r);
}

}  // namespace ucm::audit
