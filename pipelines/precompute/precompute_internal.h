// pipelines/precompute/precompute_internal.h: what the parts of `ucm precompute` share (internal).
//   precompute.cc      run_precompute: options, model, tokenizer, store, then the pipeline
//   config.cc          YAML config, option checks, shard / layer parsing
//   namespace_setup.cc the run's namespace and its r4_projection
//   runner.cc          the TBB pipeline (read, prefill, process, register)
//   signals.cc         SIGINT / SIGTERM: stop reading, finish what is in flight
//   report.cc          the summaries as text and JSON
//   bench.cc           `ucm bench precompute`
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "doc_source.h"
#include "ucm/model/model_load.h"
#include "ucm/precompute/precompute.h"
#include "ucm/clock.h"
#include "ucm/store.h"

namespace ucm::precompute::detail {

using Clock = std::chrono::steady_clock;

inline double secs_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Wall-clock milliseconds since the epoch.
using ucm::now_ms;  // ucm/clock.h

/// InvalidArgument naming the bad option (corpus, block size, hash bits, shard, batch tokens,
/// max doc tokens); OK otherwise (config.cc).
Status validate(const PrecomputeOptions& o);
/// o.fingerprint.dtype as a DType (config.cc); validate() has refused any other name.
DType payload_dtype(const PrecomputeOptions& o);
/// The corpus reader's options for `o` (config.cc).
DocSourceOptions source_options(const PrecomputeOptions& o);

/// The model of `res`, or loaded from o.model_dir into *owned (precompute.cc).
/// Also sets libtorch's threads (o.threads) and resolves o.compute_dtype (model::load_model);
/// *compute gets what runs ("given" as its path for a model of `res`).
using ComputeInfo = model::ComputeInfo;
Status load_model(const PrecomputeOptions& o, const Resources& res, std::unique_ptr<model::LlamaModel>* owned,
                  const model::LlamaModel** m, ComputeInfo* compute);
/// The tokenizer of `res`, or loaded from o.tokenizer_file / MODEL/tokenizer.json (precompute.cc).
Status load_tokenizer(const PrecomputeOptions& o, const Resources& res, std::unique_ptr<tok::Tokenizer>* owned,
                      const tok::Tokenizer** t);

/// Registers (or finds) the run's namespace in `store` and its r4_projection attachment
/// (namespace_setup.cc). Refuses a store that holds the same model under another fingerprint
/// unless o.fingerprint.namespace_name is set. Fills sum->namespace_id / namespace_name.
Status setup_namespace(Store* store, const model::LlamaModel& m, const PrecomputeOptions& o, PrecomputeSummary* sum,
                       NamespaceId* ns, NamespaceDesc* desc, std::vector<float>* proj);

/// Chunk mode (store_v1.md §4.4), namespace_setup.cc. The template's prefix tokenized on its own
/// (text entries' chunk prefix); InvalidArgument for a template with a suffix.
Status template_chunk_prefix(const tok::Tokenizer& tk, const std::string& prefix, const std::string& suffix,
                             std::vector<int32_t>* prefix_ids);
/// The namespace's stored `chunk_prefix` attachment; *found false (and OK) when it has none.
Status stored_chunk_prefix(Store* store, const NamespaceId& ns, std::vector<int32_t>* ids, bool* found);
/// Stores the namespace's `chunk_prefix` (ids) and `rope` attachments, or checks them against what
/// is stored: another prefix is InvalidArgument (a namespace has one chunk prefix).
Status put_chunk_attachments(Store* store, const model::LlamaModel& m, const NamespaceId& ns,
                             const std::vector<int32_t>& ids);

/// The chunk prefix of a run in chunk mode. Known once the namespace has one: stored by an earlier
/// run, put at the start from --template, or put by the run's first document (a token-ids entry
/// gives its own: its first prefix_tokens ids, docs/precompute.md).
struct ChunkPrefix {
  bool known = false;
  std::vector<int32_t> ids;           ///< the namespace's chunk prefix, when known
  std::vector<int32_t> template_ids;  ///< the template's prefix as ucm tokenizes it (text entries)
};

/// Runs the pipeline over `src` into `store` (runner.cc). total_docs: for the progress line
/// (0 = unknown). Fills the summary, prefill_seconds included.
/// chunk: the chunk prefix in chunk mode (o.chunks), else unused.
Status run_pipeline(const PrecomputeOptions& o, const model::LlamaModel& m, const tok::Tokenizer& tk, Store* store,
                    const NamespaceId& ns, const NamespaceId& hash_seed, const std::vector<float>& proj,
                    const ChunkPrefix& chunk, DocSource* src, uint64_t total_docs,
                    PrecomputeSummary* sum);

}  // namespace ucm::precompute::detail
