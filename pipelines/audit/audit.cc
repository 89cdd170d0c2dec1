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

#include "llama_model.h"
#include "model_load.h"
#include "ucm/admin.h"
#include "ucm/hash.h"
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

  model::LoadOptions lo;
  lo.model_dir = o.model_dir;
  lo.device = o.device;
  lo.compute_dtype = o.compute_dtype;
  lo.threads = o.threads;
  std::unique_ptr<model::LlamaModel> m;
  model::ComputeInfo ci;
  st = model::load_model(lo, &m, &ci);
  if (!st.ok()) return st;
  r->compute_dtype = ci.dtype;
  r->compute_path = ci.path;
  const auto& c = m->config();
  if (m->weights_digest() != d.weights_digest || uint32_t(c.num_hidden_layers) != d.num_layers ||
      uint32_t(c.num_key_value_heads) != d.num_kv_heads || uint32_t(c.head_dim) != d.head_dim)
    return Status::InvalidArgument("--model " + o.model_dir + " is not namespace " + d.display_name() +
                                   "'s model (weights digest " + m->weights_digest() + " vs " + d.weights_digest +
                                   ", or its layers / KV heads / head dim differ): every block would look poisoned");

  // Draw the blocks: a uniform reservoir over the index (or all of them).
  std::vector<BlockHash> drawn;
  std::set<BlockHash> parents;  // --all: the blocks that have a child, so chain ends go first
  std::mt19937_64 rng(o.seed);
  uint64_t seen = 0;
  st = store->for_each_block(ns, [&](const BlockHash& h, const BlockInfo& bi) {
    ++seen;
    if (o.all) parents.insert(bi.parent);
    if (o.all || drawn.size() < o.sample) drawn.push_back(h);
    else if (const uint64_t k = rng() % seen; k < o.sample) drawn[k] = h;
    return true;
  });
  if (!st.ok()) return st;
  r->blocks_in_namespace = seen;
  r->sampled = drawn.size();
  std::sort(drawn.begin(), drawn.end());
  drawn.erase(std::unique(drawn.begin(), drawn.end()), drawn.end());  // a block in two shards
  // --all: the ends of chains first; one prefill each then covers every block before them.
  if (o.all)
    std::stable_partition(drawn.begin(), drawn.end(), [&](const BlockHash& h) { return !parents.count(h); });

  const size_t T = d.block_size, H = d.num_kv_heads, D = d.head_dim, L = d.num_layers;
  const torch::ScalarType kv_dtype = torch_dtype(d.dtype);
  const BlockHash root = root_hash(d.hash_seed());
  std::set<BlockHash> done;
  std::string payload;  // the loaded payloads of one chain
  bool have_poisoned_dev = false;
  size_t k = 0;
  for (const BlockHash& h : drawn) {
    ++k;
    prog.tick([&] {
      return "audit: " + std::to_string(k) + "/" + std::to_string(drawn.size()) + " drawn blocks, " +
             std::to_string(r->audited) + " audited, " + std::to_string(r->poisoned_total) + " poisoned";
    });
    if (done.count(h)) continue;
    std::vector<uint32_t> ids;
    size_t nb = 0;
    Status cs = store->chain_tokens(ns, h, &ids, &nb);
    if (cs.code() == Code::kNotSupported) {
      ++r->tokens_unknown;
      continue;
    }
    if (cs.code() == Code::kNotFound) {
      ++r->missing;
      continue;
    }
    if (!cs.ok()) return cs;
    std::vector<BlockHash> chain;
    hash_blocks(root, ids.data(), ids.size(), uint32_t(T), &chain);
    if (chain.size() != nb || chain.back() != h)
      return Status::Corruption("block " + to_hex(h) + ": the token ids of its chain do not hash to it (a record's "
                                "ids or parent are wrong; run `ucm inspect --verify`)");
    // One prefill of the whole chain; K/V in the namespace dtype.
    torch::Tensor tokens = torch::empty({1, int64_t(ids.size())}, torch::kInt64);
    for (size_t i = 0; i < ids.size(); ++i) tokens.data_ptr<int64_t>()[i] = int64_t(ids[i]);
    torch::Tensor lengths = torch::full({1}, int64_t(ids.size()), torch::kInt64);
    model::LlamaModel::Output out;
    try {
      out = m->forward(tokens.to(m->device()), lengths.to(m->device()), false, kv_dtype);
    } catch (const std::exception& e) {
      return Status::Internal(std::string("audit prefill: ") + e.what());
    }
    ++r->chains;
    r->tokens_recomputed += ids.size();
    // The chain's blocks not audited yet, loaded in one task.
    std::vector<size_t> wanted;
    for (size_t j = 0; j < nb; ++j)
      if (done.insert(chain[j]).second) wanted.push_back(j);
    std::vector<BlockHash> want;
    for (size_t j : wanted) want.push_back(chain[j]);
    payload.resize(wanted.size() * d.payload_bytes());
    LoadDest dest;
    dest.kind = LoadDest::Kind::kContiguous;
    for (size_t k2 = 0; k2 < wanted.size(); ++k2) dest.ptrs.push_back(payload.data() + k2 * d.payload_bytes());
    auto task = store->load(ns, want.data(), want.size(), dest);
    (void)task->wait();  // per-block results below
    for (size_t k2 = 0; k2 < wanted.size(); ++k2) {
      const size_t j = wanted[k2];
      if (!task->block_status()[k2].ok()) {
        ++r->load_errors;
        continue;
      }
      ++r->audited;
      // stored: [L][2][T][H][D]; recomputed: out.k[l] / out.v[l] [1, n, H, D].
      torch::Tensor stored = torch::from_blob(payload.data() + k2 * d.payload_bytes(),
                                              {int64_t(L), 2, int64_t(T), int64_t(H), int64_t(D)}, kv_dtype)
                                 .to(torch::kFloat);
      double worst = 0;
      int bad_layer = -1;
      const char* bad_kv = "K";
      for (size_t l = 0; l < L; ++l)
        for (int kv = 0; kv < 2; ++kv) {
          torch::Tensor ref = (kv ? out.v[l] : out.k[l])[0].narrow(0, int64_t(j * T), int64_t(T)).to(torch::kCPU).to(torch::kFloat);
          // Per token: ||stored_t - recomputed_t|| over its [H][D], the largest of the block's T
          // tokens, relative to the RMS of the recomputed tokens' norms (a token of tiny norm, such
          // as some V rows, must not blow its own ratio up). A writer's compute path moves single elements by up to ~17%
          // of the slice's largest (bf16 compute, measured) but a token's vector by a few %; one
          // wrong token of 16 moves its own vector by ~100% (the whole slice's norm only by ~12%).
          const torch::Tensor diff = (stored[int64_t(l)][kv] - ref).flatten(1).norm(2, {1});
          const double rms = std::max(ref.norm().item<double>() / std::sqrt(double(T)), 1e-12);
          const double dev = diff.max().item<double>() / rms;
          if (std::isnan(dev) || dev > r->tolerance) {
            if (bad_layer < 0) {
              bad_layer = int(l);
              bad_kv = kv ? "V" : "K";
            }
          }
          worst = std::isnan(dev) ? INFINITY : std::max(worst, dev);
        }
      if (bad_layer < 0) {
        ++r->honest;
        r->max_honest_deviation = std::max(r->max_honest_deviation, worst);
      } else {
        ++r->poisoned_total;
        r->min_poisoned_deviation = have_poisoned_dev ? std::min(r->min_poisoned_deviation, worst) : worst;
        have_poisoned_dev = true;
        if (r->poisoned.size() < 1000)
          r->poisoned.push_back({to_hex(chain[j]), j, uint32_t(bad_layer), bad_kv, worst});
      }
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
  // --fix: gc removes them (through a live writer when one runs), every block chained after them,
  // and the documents that lose a block, so that `precompute --resume` recomputes those.
  store.reset();
  admin::GcOptions go;
  for (const auto& p : r->poisoned) {
    BlockHash b{};
    (void)parse_hex16(p.block_hex, &b);
    go.remove.emplace_back(ns, b);
  }
  go.progress = o.progress;
  admin::GcReport gr;
  st = admin::gc(o.store, go, &gr);
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

}  // namespace ucm::audit
