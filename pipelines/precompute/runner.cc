// pipelines/precompute/runner.cc: the precompute pipeline (precompute.h; docs/precompute.md):
// read and pack, prefill, process (hashes, payload, representations, dumps), register.
#include <unistd.h>

#include <tbb/parallel_for.h>
#include <tbb/parallel_pipeline.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unordered_set>

#include "precompute_internal.h"
#include "ucm/model/llama_model.h"
#include "signals.h"
#include "ucm/hash.h"
#include "ucm/precompute/repr.h"
#include "ucm/tok/tokenizer.h"
#include "ucm/token_ids/token_ids.h"

namespace ucm::precompute::detail {
namespace {

constexpr const char* kChunkIdPrefix = "chunk:";  // store_v1.md §4.4


// Carries a Status out of a TBB stage (cancels the pipeline).
struct Abort {
  Status st;
};

torch::ScalarType torch_dtype(DType d) {
  switch (d) {
    case DType::kBF16: return torch::kBFloat16;
    case DType::kFP16: return torch::kHalf;
    case DType::kFP32: return torch::kFloat32;
  }
  return torch::kBFloat16;
}

// ---------------------------------------------------------------- pipeline items
struct DocWork {
  std::string id, source;
  std::vector<int32_t> ids;  // exactly n_blocks * block_size tokens (template prefix + document)
  bool truncated = false;
  bool from_token_ids = false;  // the corpus entry gave the ids (registry "input": "token_ids")
};

struct DocDump {
  std::vector<BlockHash> hashes;
  std::vector<uint8_t> present;  // left to another document of the batch, which dumps it
  std::vector<std::string> reprs;
  std::vector<const void*> pages;
  std::vector<DumpItem> items;
  std::shared_ptr<Task> task;
  uint64_t written = 0, existing = 0;
};

struct Batch {
  uint64_t seq = 0;  // order of creation
  std::vector<DocWork> docs;
  int64_t T = 0;
  model::LlamaModel::Output out;       // K/V in the payload dtype, freed after stage 3
  std::vector<torch::Tensor> kp, vp;   // payload dtype [B, T, H, D], contiguous
  std::vector<DocDump> dumps;
  std::unordered_set<std::string> claimed;  // block hashes a document of this batch dumps
  ~Batch() {
    // Dump tasks reference kp/vp/reprs: never free them under a running task.
    for (auto& d : dumps)
      if (d.task) (void)d.task->wait(-1);  // only to outlive the task; its result was taken in stage 4
  }
};
using BatchPtr = std::shared_ptr<Batch>;

// ---------------------------------------------------------------- the run
class Runner {
 public:
  Runner(const PrecomputeOptions& o, const model::LlamaModel& m, const tok::Tokenizer& tk, Store* store,
         const NamespaceId& ns, const NamespaceId& hash_seed, const std::vector<float>& proj,
         PrecomputeSummary* sum)
      : o_(o), m_(m), tk_(tk), store_(store), ns_(ns), sum_(sum), proj_(proj.data()) {
    const auto& c = m.config();
    L_ = c.num_hidden_layers;
    H_ = c.num_key_value_heads;
    D_ = c.head_dim;
    bs_ = o.fingerprint.block_size;
    dtype_ = payload_dtype(o);
    spec_ = ReprSpec{uint32_t(L_), uint32_t(H_), uint32_t(D_), bs_, o.fingerprint.hash_bits, dtype_};
    root_ = root_hash(hash_seed);  // spec §7.1: chains start from the namespace's hash seed
    max_tokens_ = o.max_doc_tokens ? o.max_doc_tokens : uint64_t(c.max_position_embeddings);
    max_tokens_ = std::min<uint64_t>(max_tokens_, uint64_t(c.max_position_embeddings));
    max_tokens_ -= max_tokens_ % bs_;
  }

  /// Chunk mode (o.chunks): documents are tokenized apart and follow the chunk prefix.
  void set_chunk_prefix(const ChunkPrefix& c) { chunk_ = c; }

  Status run(DocSource* src, uint64_t total_docs) {
    src_ = src;
    total_docs_ = total_docs;
    t0_ = Clock::now();
    last_progress_ = t0_;
    show_progress_ = o_.progress || ::isatty(STDERR_FILENO);
    Status st;
    try {
      tbb::parallel_pipeline(
          std::max<uint32_t>(1, o_.max_batches_in_flight),
          tbb::make_filter<void, BatchPtr>(tbb::filter_mode::serial_in_order,
                                           [this](tbb::flow_control& fc) { return next_batch(fc); }) &
              tbb::make_filter<BatchPtr, BatchPtr>(tbb::filter_mode::serial_in_order,
                                                   [this](BatchPtr b) { return prefill(std::move(b)); }) &
              tbb::make_filter<BatchPtr, BatchPtr>(tbb::filter_mode::parallel,
                                                   [this](BatchPtr b) { return process(std::move(b)); }) &
              tbb::make_filter<BatchPtr, void>(tbb::filter_mode::serial_in_order,
                                               [this](BatchPtr b) { finish(std::move(b)); }));
    } catch (const Abort& a) {
      st = a.st;
    } catch (const model::ModelError& e) {
      st = Status::InvalidArgument(std::string("model: ") + e.what());
    } catch (const std::exception& e) {
      st = Status::Internal(std::string("precompute pipeline: ") + e.what());
    }
    if (!src_error_.ok() && st.ok()) st = src_error_;
    sum_->interrupted = stop_requested();
    sum_->signal = stop_signal();
    sum_->seconds = secs_since(t0_);
    sum_->tokens_per_second = sum_->seconds > 0 ? double(sum_->tokens) / sum_->seconds : 0;
    if (show_progress_) {
      print_progress(true);
      progress_log().info("\n");  // ends the line
    }
    return st;
  }

 private:
  // ---- stage 1: read, template, tokenize, truncate, pack (serial)
  // After a stop signal no batch enters the pipeline, not even one already packed: only batches
  // being prefilled or processed finish (they are dumped and registered).
  BatchPtr next_batch(tbb::flow_control& fc) {
    if (stop_requested()) {
      fc.stop();
      return nullptr;
    }
    while (ready_.empty()) {
      if (eof_ || stop_requested()) {
        fc.stop();
        return nullptr;
      }
      fill_window();
      pack_window();
    }
    BatchPtr b = std::move(ready_.front());
    ready_.pop_front();
    return b;
  }

  // Counts a skipped entry under `kind`; entries that are not stored because of a problem with
  // them (everything but "resumed") are also listed in the summary with where and why.
  void skip(const std::string& kind, const std::string& id = {}, const std::string& location = {},
            const std::string& reason = {}) {
    std::lock_guard<std::mutex> g(sum_mu_);
    sum_->skipped[kind]++;
    if (kind == "resumed") return;
    if (sum_->skipped_entries.size() < PrecomputeSummary::kMaxSkippedEntries)
      sum_->skipped_entries.push_back({kind, id, location, reason});
    else
      sum_->skipped_entries_truncated = true;
  }

  void fill_window() {
    const uint64_t budget = uint64_t(std::max<uint32_t>(1, o_.sort_window_batches)) * o_.batch_tokens;
    uint64_t tokens = 0;
    while (!eof_ && !stop_requested() && tokens < budget) {
      if (o_.limit && sum_->documents_seen >= o_.limit) {
        eof_ = true;
        break;
      }
      SourceDoc d;
      SkippedEntry sk;
      Status st;
      auto r = src_->next(&d, &sk, &st);
      if (r == DocSource::Result::kEnd) {
        eof_ = true;
        if (!st.ok()) src_error_ = st;
        break;
      }
      if (r == DocSource::Result::kSkipped) {
        spdlog::warn("corpus: {}: {}, skipped ({})", sk.location, sk.reason, sk.kind);
        skip(sk.kind, {}, sk.location, sk.reason);
        continue;
      }
      sum_->documents_seen++;
      if (d.id.rfind(kChunkIdPrefix, 0) == 0) {
        spdlog::warn("corpus: {}: document id {} starts with \"{}\", which names chunks in the registry: skipped",
                     d.source, d.id, kChunkIdPrefix);
        skip("malformed", d.id, d.source, std::string("ids starting with \"") + kChunkIdPrefix + "\" are reserved for chunks");
        continue;
      }
      if (o_.chunks) d.id = kChunkIdPrefix + d.id;  // store_v1.md §4.4: the chunk's registry id
      if (o_.resume) {
        // A registered document is skipped only while its last block is still stored: that
        // block's hash chains its whole prefix, and gc drops the registry entry of a document
        // that loses any block, so the entry and its last block together mean "complete".
        DocumentEntry e;
        if (store_->get_document(ns_, d.id, &e).ok()) {
          BlockInfo bi;
          if (store_->get_block(ns_, e.last_block, &bi).ok()) {
            skip("resumed");
            continue;
          }
          spdlog::warn("document {} ({}) is registered but its last block {} is gone; computing it again", d.id,
                       d.source, to_hex(e.last_block));
        }
      }
      std::vector<int32_t> ids;
      size_t prefix_len = 0;  // chunk mode: tokens of the chunk prefix at the start of ids
      if (d.has_token_ids) {
        if (!take_token_ids(d, &ids, &prefix_len)) {
          if (!src_error_.ok()) break;
          continue;
        }
      } else {
        if (d.text.find_first_not_of(" \t\r\n\f\v") == std::string::npos) {
          spdlog::warn("corpus: {}: document {} is only white space, skipped (empty)", d.source, d.id);
          skip("empty", d.id, d.source, "only white space");
          continue;
        }
        if (!tokenize(d, &ids, &prefix_len)) {
          if (!src_error_.ok()) break;
          continue;
        }
      }
      DocWork w;
      if (ids.size() > max_tokens_) {
        ids.resize(max_tokens_);
        w.truncated = true;
      }
      const size_t full = ids.size() - ids.size() % bs_;
      if (full == 0 || (o_.chunks && full <= prefix_len)) {
        spdlog::info("document {} ({}): {} tokens < one block of {}, skipped", d.id, d.source, ids.size(), bs_);
        skip("short", d.id, d.source,
             std::to_string(ids.size()) + " tokens, fewer than one block of " + std::to_string(bs_));
        continue;
      }
      ids.resize(full);
      w.id = std::move(d.id);
      w.source = std::move(d.source);
      w.ids = std::move(ids);
      w.from_token_ids = d.has_token_ids;
      tokens += w.ids.size();
      window_.push_back(std::move(w));
    }
  }

  // A text entry: ucm's tokenizer over template + document (chunk mode: the chunk prefix, then the
  // document tokenized on its own, store_v1.md §4.4). False: skipped, or a fatal error in src_error_.
  bool tokenize(SourceDoc& d, std::vector<int32_t>* ids, size_t* prefix_len) {
    warn_tokenizer_once();
    try {
      if (o_.chunks) {
        std::string why;
        if (!ensure_chunk_prefix(chunk_.template_ids, &why)) {
          src_error_ = Status::InvalidArgument("--chunks: document " + d.id + " (" + d.source + "): " + why);
          eof_ = true;
          return false;
        }
        *ids = chunk_.ids;
        *prefix_len = ids->size();
        const auto doc = tk_.encode(d.text);
        ids->insert(ids->end(), doc.begin(), doc.end());
      } else {
        *ids = tk_.encode(src_->prefix() + d.text + src_->suffix());
      }
    } catch (const tok::InvalidUtf8Error& e) {
      const size_t pre = o_.chunks ? 0 : src_->prefix().size();
      const size_t off = e.offset() >= pre ? e.offset() - pre : e.offset();
      std::string msg = "document " + d.id + " (" + d.source + "): invalid UTF-8 at byte " + std::to_string(off) +
                        " of the text";
      if (o_.strict) {
        src_error_ = Status::InvalidArgument(msg + " (--strict); fix the corpus or drop --strict to skip it");
        eof_ = true;
        return false;
      }
      spdlog::warn("{}: skipped", msg);
      skip("invalid_utf8", d.id, d.source, "invalid UTF-8 at byte " + std::to_string(off) + " of the text");
      return false;
    } catch (const tok::TokenizerError& e) {
      src_error_ = Status::InvalidArgument("tokenizing document " + d.id + ": " + e.what());
      eof_ = true;
      return false;
    }
    return true;
  }

  // A token-ids entry (docs/corpus.md): its ids are stored as given, after a check that each is in
  // the model's vocabulary; in chunk mode its first prefix_tokens ids must be the namespace's chunk
  // prefix (the first such entry sets it when the namespace has none). False: skipped, or fatal
  // (--strict) in src_error_.
  bool take_token_ids(SourceDoc& d, std::vector<int32_t>* ids, size_t* prefix_len) {
    auto reject = [&](const std::string& kind, const std::string& reason) {
      if (o_.strict) {
        src_error_ = Status::InvalidArgument("document " + d.id + " (" + d.source + "): " + reason +
                                             " (--strict); fix the corpus or drop --strict to skip it");
        eof_ = true;
        return false;
      }
      spdlog::warn("corpus: {}: document {}: {}, skipped ({})", d.source, d.id, reason, kind);
      skip(kind, d.id, d.source, reason);
      return false;
    };
    const int64_t vocab = m_.config().vocab_size;
    for (size_t i = 0; i < d.token_ids.size(); ++i)
      if (vocab > 0 && d.token_ids[i] >= vocab)
        return reject("out_of_vocabulary", "token_ids[" + std::to_string(i) + "] = " + std::to_string(d.token_ids[i]) +
                                               " is outside the model's vocabulary [0, " + std::to_string(vocab) +
                                               "): ids from another model's tokenizer?");
    *prefix_len = 0;
    if (o_.chunks) {
      const std::vector<int32_t> prefix(d.token_ids.begin(), d.token_ids.begin() + d.prefix_tokens);
      std::string why;
      if (!ensure_chunk_prefix(prefix, &why)) return reject("malformed", why);
      *prefix_len = prefix.size();
    }
    *ids = std::move(d.token_ids);
    return true;
  }

  // Once per run, at the first text entry: a server on transformers >= 5 may tokenize this text
  // differently (its tokenizer class rebuilds the pre-tokenizer), and then finds none of the
  // blocks after the first difference.
  void warn_tokenizer_once() {
    if (tokenizer_warned_) return;
    tokenizer_warned_ = true;
    namespace fs = std::filesystem;
    const fs::path cfg = o_.tokenizer_file.empty() ? fs::path(o_.model_dir) / "tokenizer_config.json"
                                                   : fs::path(o_.tokenizer_file).parent_path() / "tokenizer_config.json";
    const std::string cls = tokenize::transformers_rebuilt_tokenizer_class(cfg.string());
    if (cls.empty()) return;
    spdlog::warn(
        "precompute: {} names tokenizer class {}, which transformers >= 5 (and so vLLM) builds with a pre-tokenizer "
        "of its own: a server may tokenize this text differently from ucm and find only the blocks before the first "
        "difference. Check with `ucm tokenize --compare`, or give the server's ids: \"token_ids\" corpus entries "
        "written by `python -m ucm.tokenize` (docs/python.md)",
        cfg.string(), cls);
  }

  // Chunk mode: `want` is a document's chunk prefix. The namespace's prefix is set by the first
  // document when no run has set it; every other document must have the same. False (*why says
  // where they differ) when it differs, or when storing it failed.
  bool ensure_chunk_prefix(const std::vector<int32_t>& want, std::string* why) {
    if (!chunk_.known) {
      Status st = put_chunk_attachments(store_, m_, ns_, want);
      if (!st.ok()) {
        *why = st.message();
        return false;
      }
      chunk_.known = true;
      chunk_.ids = want;
      return true;
    }
    if (want == chunk_.ids) return true;
    size_t i = 0;
    while (i < want.size() && i < chunk_.ids.size() && want[i] == chunk_.ids[i]) ++i;
    *why = "its chunk prefix (" + std::to_string(want.size()) + " tokens) differs from the namespace's (" +
           std::to_string(chunk_.ids.size()) + " tokens) at token " + std::to_string(i) +
           "; a namespace has one chunk prefix: give every entry the same prefix (token-ids entries: the same "
           "first prefix_tokens ids), or use another store";
    return false;
  }

  // Sorts the window by length (longest first) and cuts it into batches of <= batch_tokens padded
  // tokens (a single document longer than batch_tokens forms a batch of its own).
  void pack_window() {
    std::stable_sort(window_.begin(), window_.end(),
                     [](const DocWork& a, const DocWork& b) { return a.ids.size() > b.ids.size(); });
    BatchPtr cur;
    for (auto& w : window_) {
      const int64_t len = int64_t(w.ids.size());
      if (cur && uint64_t(cur->docs.size() + 1) * uint64_t(std::max(cur->T, len)) > o_.batch_tokens) {
        ready_.push_back(std::move(cur));
        cur.reset();
      }
      if (!cur) {
        cur = std::make_shared<Batch>();
        cur->seq = next_seq_++;
      }
      cur->T = std::max(cur->T, len);
      cur->docs.push_back(std::move(w));
    }
    if (cur) ready_.push_back(std::move(cur));
    window_.clear();
  }

  // ---- stage 2: prefill (serial)
  BatchPtr prefill(BatchPtr b) {
    if (!b || stop_requested()) return nullptr;  // stopped: drop batches not prefilled yet
    const int64_t B = int64_t(b->docs.size()), T = b->T;
    auto tokens = torch::zeros({B, T}, torch::kInt64);
    auto lengths = torch::empty({B}, torch::kInt64);
    auto* tp = tokens.data_ptr<int64_t>();
    auto* lp = lengths.data_ptr<int64_t>();
    for (int64_t i = 0; i < B; ++i) {
      const auto& ids = b->docs[size_t(i)].ids;
      for (size_t t = 0; t < ids.size(); ++t) tp[i * T + int64_t(t)] = ids[t];
      lp[i] = int64_t(ids.size());
    }
    auto t0 = Clock::now();
    // Attention reads K/V rounded to the store dtype, as a server with a KV cache in that dtype does.
    b->out = m_.forward(tokens, lengths, false, torch_dtype(dtype_));
    prefill_seconds_ += secs_since(t0);
    return b;
  }

  // ---- stage 3: payloads, hashes, representations, async dump (parallel)
  BatchPtr process(BatchPtr b) {
    if (!b) return b;
    c10::InferenceMode guard;
    const auto dt = torch_dtype(dtype_);
    const int64_t B = int64_t(b->docs.size()), T = b->T;
    b->kp.resize(size_t(L_));
    b->vp.resize(size_t(L_));
    // On a GPU the payloads come back through pinned buffers, all copies in flight before one wait.
    const bool gpu = m_.device().is_cuda();
    auto to_host = [&](const torch::Tensor& t) {
      if (!gpu) return t.contiguous();
      auto h = torch::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(true));
      h.copy_(t, /*non_blocking=*/true);
      return h;
    };
    for (int64_t l = 0; l < L_; ++l) {
      // forward() returns K/V in the payload dtype (its kv_dtype): no conversion on the CPU.
      b->kp[size_t(l)] = to_host(b->out.k[size_t(l)].to(dt));
      b->vp[size_t(l)] = to_host(b->out.v[size_t(l)].to(dt));
    }
    if (gpu) torch::cuda::synchronize();
    b->out = {};
    const size_t esz = dtype_size(dtype_);
    b->dumps.resize(size_t(B));
    tbb::parallel_for(int64_t(0), B, [&](int64_t bi) {
      auto& doc = b->docs[size_t(bi)];
      auto& dd = b->dumps[size_t(bi)];
      const size_t nblk = doc.ids.size() / bs_;
      hash_blocks(root_, reinterpret_cast<const uint32_t*>(doc.ids.data()), doc.ids.size(), bs_, &dd.hashes);
      dd.present.assign(nblk, 0);
      std::vector<const void*> kptr(static_cast<size_t>(L_));
      // Every block goes to the store, which skips the ones it holds (checked in its index, so a
      // lookup fingerprint collision cannot leave a registered document with a missing block) and
      // says per block whether it wrote it (Task::block_written, counted in stage 4). Blocks
      // another document of this batch dumps are left to it (the batch is registered only once
      // all of its dumps are done); a block that another batch in flight dumps too is written by
      // whichever commits first, and the other finds it present.
      {
        std::lock_guard<std::mutex> g(claim_mu_);
        for (size_t i = 0; i < nblk; ++i) {
          std::string key(reinterpret_cast<const char*>(dd.hashes[i].data()), dd.hashes[i].size());
          if (!b->claimed.insert(std::move(key)).second) dd.present[i] = 1;
        }
      }
      size_t n_new = 0;
      for (size_t i = 0; i < nblk; ++i) n_new += dd.present[i] ? 0 : 1;
      dd.reprs.resize(n_new);
      dd.pages.resize(n_new * size_t(L_) * 2);
      dd.items.resize(n_new);
      size_t k = 0;
      for (size_t i = 0; i < nblk; ++i) {
        if (dd.present[i]) continue;
        const int64_t row = bi * T + int64_t(i * bs_);  // first token of the block in [B*T]
        for (int64_t l = 0; l < L_; ++l) {
          const char* kb = static_cast<const char*>(b->kp[size_t(l)].data_ptr()) + size_t(row * H_ * D_) * esz;
          const char* vb = static_cast<const char*>(b->vp[size_t(l)].data_ptr()) + size_t(row * H_ * D_) * esz;
          kptr[size_t(l)] = kb;
          dd.pages[(k * size_t(L_) + size_t(l)) * 2 + 0] = kb;
          dd.pages[(k * size_t(L_) + size_t(l)) * 2 + 1] = vb;
        }
        // Representations from the payload's keys, R4's dot products in fp32 (repr_encode.h).
        repr::encode_block_repr_payload(spec_, kptr.data(), dtype_, size_t(H_ * D_), proj_, &dd.reprs[k]);
        DumpItem& it = dd.items[k];
        it.hash = dd.hashes[i];
        it.parent = i == 0 ? root_ : dd.hashes[i - 1];
        it.token_count = bs_;
        it.kv_pages = dd.pages.data() + k * size_t(L_) * 2;
        it.repr = dd.reprs[k].data();
        it.repr_len = dd.reprs[k].size();
        // The block's ids go into its record (store_v1.md §3.2): the audit and KV events read them.
        it.tokens = reinterpret_cast<const uint32_t*>(doc.ids.data()) + i * bs_;
        ++k;
      }
      if (n_new) dd.task = store_->dump(ns_, dd.items.data(), dd.items.size());
    });
    // kp/vp live until the dumps are done.
    return b;
  }

  // ---- stage 4: durability, then registration (serial)
  void finish(BatchPtr b) {
    if (!b) return;
    for (size_t i = 0; i < b->docs.size(); ++i) {
      auto& dd = b->dumps[i];
      dd.written = 0;
      if (dd.task) {
        Status st = dd.task->wait(-1);
        if (!st.ok())
          throw Abort{Status(st.code(), "dumping blocks of document " + b->docs[i].id + ": " + st.message())};
        for (uint8_t w : dd.task->block_written()) dd.written += w;
      }
      dd.existing = dd.hashes.size() - dd.written;
    }
    // The whole batch is registered at once: one fdatasync and one synced index write.
    std::vector<DocumentEntry> entries(b->docs.size());
    for (size_t i = 0; i < b->docs.size(); ++i) {
      const auto& doc = b->docs[i];
      const auto& dd = b->dumps[i];
      DocumentEntry& e = entries[i];
      e.id = doc.id;
      e.first_block = dd.hashes.front();
      e.last_block = dd.hashes.back();
      e.blocks = uint32_t(dd.hashes.size());
      e.tokens = doc.ids.size();
      e.source = doc.source;
      e.created_ms = now_ms();
      if (doc.from_token_ids) e.input = "token_ids";
    }
    Status st = entries.empty() ? Status::OK() : store_->put_documents(ns_, entries.data(), entries.size());
    if (!st.ok())
      throw Abort{Status(st.code(), "registering " + std::to_string(entries.size()) + " documents (" +
                                        entries.front().id + (entries.size() > 1 ? ", ..." : "") +
                                        "): " + st.message())};
    for (size_t i = 0; i < b->docs.size(); ++i) {
      auto& doc = b->docs[i];
      auto& dd = b->dumps[i];
      sum_->documents++;
      sum_->tokens += doc.ids.size();
      sum_->blocks_written += dd.written;
      sum_->blocks_existing += dd.existing;
      if (doc.truncated) sum_->truncated++;
    }
    b->dumps.clear();  // tasks done: nothing to wait for in ~Batch
    if (show_progress_) print_progress(false);
  }

  void print_progress(bool force) {
    auto now = Clock::now();
    if (!force && std::chrono::duration<double>(now - last_progress_).count() < 1.0) return;
    last_progress_ = now;
    const double el = secs_since(t0_);
    const double tps = el > 0 ? double(sum_->tokens) / el : 0;
    uint64_t skipped = 0;
    for (auto& [k, v] : sum_->skipped) skipped += v;
    const uint64_t done = sum_->documents + skipped;
    std::string eta = "?";
    if (total_docs_ && done > 0 && done <= total_docs_) {
      const double rem = el / double(done) * double(total_docs_ - done);
      char buf[32];
      std::snprintf(buf, sizeof buf, "%dm%02ds", int(rem) / 60, int(rem) % 60);
      eta = buf;
    }
    progress_log().info("\rprecompute: docs {}/{} (skipped {})  {:.0f} tok/s  blocks {} new {} existing  ETA {}   ", done,
                        total_docs_ ? std::to_string(total_docs_) : "?", skipped, tps, sum_->blocks_written,
                        sum_->blocks_existing, eta);
  }

  // The progress line on stderr, redrawn in place: bare text, no line ending (each line starts
  // with a carriage return; the last is ended by a message of its own).
  static spdlog::logger& progress_log() {
    static const std::shared_ptr<spdlog::logger> log = [] {
      auto l = std::make_shared<spdlog::logger>("precompute-progress",
                                                std::make_shared<spdlog::sinks::stderr_sink_mt>());
      l->set_formatter(std::make_unique<spdlog::pattern_formatter>("%v", spdlog::pattern_time_type::local, ""));
      l->set_level(spdlog::level::info);
      l->flush_on(spdlog::level::info);
      return l;
    }();
    return *log;
  }

 public:
  double prefill_seconds() const { return prefill_seconds_; }

 private:
  const PrecomputeOptions& o_;
  const model::LlamaModel& m_;
  const tok::Tokenizer& tk_;
  ChunkPrefix chunk_;
  bool tokenizer_warned_ = false;
  Store* store_;
  NamespaceId ns_;
  PrecomputeSummary* sum_;
  int64_t L_ = 0, H_ = 0, D_ = 0;
  uint32_t bs_ = 16;
  DType dtype_ = DType::kBF16;  // o_.fingerprint.dtype
  ReprSpec spec_;
  BlockHash root_{};
  uint64_t max_tokens_ = 0;
  const float* proj_;  // fp32 [L][H][D][NB] (run_pipeline's caller owns it)
  DocSource* src_ = nullptr;
  uint64_t total_docs_ = 0;
  bool eof_ = false;
  Status src_error_;
  std::vector<DocWork> window_;
  std::deque<BatchPtr> ready_;
  std::mutex sum_mu_, claim_mu_;
  uint64_t next_seq_ = 0;
  double prefill_seconds_ = 0;
  Clock::time_point t0_, last_progress_;
  bool show_progress_ = false;
};

}  // namespace

Status run_pipeline(const PrecomputeOptions& o, const model::LlamaModel& m, const tok::Tokenizer& tk, Store* store,
                    const NamespaceId& ns, const NamespaceId& hash_seed, const std::vector<float>& proj,
                    const ChunkPrefix& chunk, DocSource* src, uint64_t total_docs,
                    PrecomputeSummary* sum) {
  Runner r(o, m, tk, store, ns, hash_seed, proj, sum);
  r.set_chunk_prefix(chunk);
  Status st = r.run(src, total_docs);
  sum->prefill_seconds = r.prefill_seconds();
  return st;
}

}  // namespace ucm::precompute::detail
