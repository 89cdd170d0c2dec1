// `ucm precompute`: batch prefill of a corpus with a real model into a ucm store.
//
// Pipeline (TBB parallel_pipeline, docs/precompute.md):
//   1. serial   read document -> apply template -> tokenize -> truncate -> pack batches
//               (a window of documents is sorted by length and cut into batches of at most
//               `batch_tokens` padded tokens, B * T_max <= batch_tokens)
//   2. serial   prefill: LlamaModel::forward (torch intra-op threads)
//   3. parallel per document: block hashes (ucm::hash_blocks), payload conversion, R0/R1/R4,
//               async Store::dump
//   4. serial   wait for the dumps, then Store::put_documents for the batch (a document is
//               registered only after all of its blocks are durable)
// At most `max_batches_in_flight` batches are alive at once (bounded memory, see docs).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ucm/model/identity.h"
#include "ucm/namespace.h"
#include "ucm/status.h"

namespace ucm::model {
class LlamaModel;
}
namespace ucm::tok {
class Tokenizer;
}

namespace ucm::precompute {

struct PrecomputeOptions {
  std::string model_dir;      ///< Hugging Face model directory (config.json + safetensors)
  std::string tokenizer_file; ///< default: <model_dir>/tokenizer.json
  std::string corpus;         ///< JSONL file ({id, text, source}) or directory of text files
  std::string corpus_suffix;  ///< directory corpora: only files whose name ends with this ("" = all)
  std::string store;          ///< store directory; created when missing
  std::string template_file;  ///< prompt template (see docs/precompute.md); "" = none
  /// The options that enter the namespace fingerprint (ucm/model/identity.h, their one owner):
  /// namespace_name ("" = the default name model/dtype/b<bs>/<id8>), block_size (tokens per
  /// block), dtype (payload and R0/R1 element type: "bf16", "fp16", "fp32"), hash_bits (R4 bits
  /// per token, a multiple of 8), dense_layers (recorded in the namespace for servers),
  /// projection_seed (seed of the r4_projection).
  model::FingerprintOptions fingerprint;
  uint64_t limit = 0;                ///< stop after this many documents read (0 = all)
  uint32_t shard_index = 0, shard_count = 1;  ///< process documents with ordinal % N == I
  /// The writer shard of a sharded store (store_v1.md §11) this run writes: "" = "precompute-I"
  /// when shard_count > 1, else $UCM_SHARD or the host name. A missing store is created sharded
  /// when a shard name results from this, --shard or $UCM_SHARD. Single stores ignore it.
  std::string shard_name;
  bool resume = false;               ///< skip documents already registered in the namespace
  /// > 0: after the documents, (re)build the namespace's SGLang page alias table for this page
  /// size (store_v1.md §12.1; `ucm sglang-pages`), so SGLang's HiCache finds the blocks.
  uint32_t sglang_page_size = 0;
  bool chunks = false;               ///< store each document as a chunk (store_v1.md §4.4): the
                                     ///< template's prefix then the document, tokenized apart,
                                     ///< registered as "chunk:<id>"; the template has no suffix
  bool strict = false;               ///< malformed corpus lines / invalid UTF-8 are fatal
  bool progress = false;             ///< force the progress line (default: only when stderr is a TTY)
  uint64_t batch_tokens = 4096;      ///< padded tokens per prefill batch (B * T_max)
  uint64_t max_doc_tokens = 0;       ///< 0 = max_position_embeddings rounded down to fingerprint.block_size
  uint32_t max_batches_in_flight = 3;///< bound on live batches (memory bound)
  uint32_t sort_window_batches = 8;  ///< documents buffered for length sorting, in batches
  bool handle_signals = true;        ///< SIGINT/SIGTERM stop reading and finish in-flight work
  /// Where prefill runs: "cpu" or "cuda" / "cuda:N" (needs a CUDA-enabled libtorch, e.g.
  /// PyTorch's: docs/precompute.md, "On a GPU"). On a GPU the K/V, their store-dtype copies and
  /// the R4 projections are computed on the device and come back to host memory per batch; the
  /// store writes of a batch overlap the next batch's prefill as on the CPU.
  std::string device = "cpu";
  /// The dtype of the runner's GEMMs: "fp32" (default), "bf16" (fp32 accumulation; refused on a
  /// CPU without AMX-BF16 or AVX512-BF16) or "auto" (bf16 where the device has bf16 matrix units,
  /// fp32 elsewhere). The stored K/V are in `fingerprint.dtype` either way. fp32 stays the default until bf16
  /// meets the K/V parity bar on every layer (docs/model.md, "Compute dtype").
  std::string compute_dtype = "fp32";
  /// Prefill threads; 0 = the default. On the fused CPU kernels (either compute dtype) one
  /// prefill worker per core (n > 0: n workers), each one libtorch thread and, at fp32, its GEMMs
  /// on OpenBLAS in its own thread; a worker whose sequences are done helps the others
  /// (model::LlamaModel::set_prefill_workers, pipelines/model/include/ucm/model/crew.h). Without the kernels
  /// (UCM_FP32_KERNELS=0) fp32 runs one libtorch thread beside OpenBLAS's own threads (unless
  /// OMP_NUM_THREADS is set), bf16 every core this process may use but one (docs/model.md,
  /// "Compute dtype"). Store I/O runs on its own threads.
  int threads = 0;
};

/// Reads a YAML config (configs/precompute.yaml) into `o`: keys are the option names above
/// (model, tokenizer, corpus, corpus_suffix, store, template, namespace_name, block_size, dtype,
/// hash_bits, dense_layers, projection_seed, limit, shard ("I/N"), resume, strict, batch_tokens,
/// max_doc_tokens, max_batches_in_flight, device, compute_dtype, threads). Unknown keys are an InvalidArgument error naming them.
Status load_config(const std::string& path, PrecomputeOptions* o);
/// Parses "I/N" (0 <= I < N).
Status parse_shard(const std::string& s, uint32_t* index, uint32_t* count);
/// Parses "0,1,5" (empty string = no layers): model::parse_layers (pipelines/model/include/ucm/model/fingerprint.h).
Status parse_layers(const std::string& s, std::vector<uint32_t>* out);

struct PrecomputeSummary {
  uint64_t documents = 0;        ///< documents registered by this run
  uint64_t documents_seen = 0;   ///< documents read from the corpus (this shard)
  std::map<std::string, uint64_t> skipped;  ///< reason -> count: empty, short, resumed, malformed, invalid_utf8
  /// One skipped entry that was not stored because of a problem with it (not "resumed").
  struct Skipped {
    std::string kind;      ///< empty, short, malformed, invalid_utf8
    std::string id;        ///< document id ("" when the entry could not be parsed)
    std::string location;  ///< "<file>:<line>" for JSONL, the file for a directory corpus
    std::string reason;
  };
  static constexpr size_t kMaxSkippedEntries = 1000;
  std::vector<Skipped> skipped_entries;    ///< in corpus order, at most kMaxSkippedEntries
  bool skipped_entries_truncated = false;  ///< more entries were skipped than listed
  uint64_t truncated = 0;        ///< documents cut at max_doc_tokens
  uint64_t blocks_written = 0;   ///< new blocks dumped
  uint64_t blocks_existing = 0;  ///< blocks already present (shared prefixes, reruns)
  uint64_t tokens = 0;           ///< tokens prefilled and stored (full blocks only)
  double seconds = 0;            ///< wall time of the pipeline (model load excluded)
  double prefill_seconds = 0;    ///< time spent inside LlamaModel::forward
  double tokens_per_second = 0;
  std::string compute_dtype;     ///< "bf16" | "fp32": what the GEMMs ran in
  std::string compute_path;      ///< "amx_bf16" | "avx512_bf16" | "cuda" | "fp32"
  int threads = 0;               ///< prefill workers on the fused kernels, else libtorch intra-op threads
  /// What ran between the GEMMs: "avx512_bf16" (the bf16 prefill's fused CPU kernels, one
  /// libtorch thread per prefill worker) | "libtorch" (its element-wise ops and matmuls).
  std::string kernels = "libtorch";
  /// fp32 on the CPU: the OpenBLAS core whose kernels ran the GEMMs ("Cooperlake", "SkylakeX",
  /// "Haswell", ...; OPENBLAS_CORETYPE or OpenBLAS's own choice); "" otherwise.
  std::string blas_core;
  /// fp32 on the CPU: the environment's OPENBLAS_CORETYPE that ucm replaced with blas_core
  /// (a core this CPU outgrows, e.g. "Haswell" on AVX-512: docs/model.md, "OpenBLAS kernels");
  /// "" when none was replaced.
  std::string blas_core_replaced;
  bool interrupted = false;      ///< stopped by SIGINT/SIGTERM
  int signal = 0;                ///< the signal that stopped the run (2 SIGINT, 15 SIGTERM), 0 = none
  std::string namespace_name, namespace_id;
  uint32_t sglang_page_size = 0;  ///< the page table built (0: none)
  uint64_t sglang_pages = 0;      ///< pages it lists
  std::string to_json() const;
  std::string to_text() const;
};

/// Already-loaded resources (the bench reuses them); null members are loaded from the options.
struct Resources {
  const model::LlamaModel* model = nullptr;
  const tok::Tokenizer* tokenizer = nullptr;
};

/// The namespace descriptor `ucm precompute` registers for `model` and o.fingerprint: the one the
/// engine computes too (model::namespace_desc_json). InvalidArgument when it does not validate.
Status make_namespace(const model::LlamaModel& model, const PrecomputeOptions& o, NamespaceDesc* out);

/// Runs the whole precompute. Errors: InvalidArgument (bad options, wrong model dir / unsupported
/// architecture, namespace mismatch, malformed corpus with --strict), IOError/NoSpace (store),
/// Busy (another writer). Blocks and documents committed before an error stay valid.
Status run_precompute(const PrecomputeOptions& o, const Resources& res, PrecomputeSummary* summary);

/// `ucm bench precompute`: bare prefill vs full precompute on the same batches.
struct BenchResult {
  uint64_t documents = 0, tokens = 0, batches = 0;
  int rounds = 1;                     ///< full precompute runs, each followed by a bare prefill
  double prefill_seconds = 0;         ///< median of the bare-prefill runs (rounds + 1 of them)
  double prefill_seconds_before = 0, prefill_seconds_after = 0;  ///< the first and the last
  double prefill_tokens_per_second = 0;  ///< tokens / prefill_seconds
  double precompute_seconds = 0, precompute_tokens_per_second = 0;  ///< median of the full runs
  double precompute_prefill_seconds = 0;  ///< time inside LlamaModel::forward during that run
  /// Per round: its full precompute's throughput over the bare prefill's of the runs around it
  /// (the mean of their seconds), to show the spread.
  std::vector<double> ratios;
  double ratio = 0;  ///< precompute_tokens_per_second / prefill_tokens_per_second (medians; target >= 0.95)
  std::string device = "cpu";  ///< where prefill ran (--device)
  std::string compute_dtype, compute_path;  ///< as in PrecomputeSummary
  int threads = 0;
  std::string kernels = "libtorch";  ///< as in PrecomputeSummary
  std::string blas_core;              ///< as in PrecomputeSummary
  std::string blas_core_replaced;     ///< as in PrecomputeSummary
  /// Rows the bare prefill's GEMMs ran: the tokens where the CPU's fused kernels run each sequence
  /// at its own length (kernels not "libtorch"), else every batch's sequences times its padded length.
  uint64_t gemm_tokens = 0;
  /// The bare prefill's GEMM work: 2 FLOPs per weight of q/k/v, o_proj and the MLP per GEMM row
  /// (the last layer's q/k/v only: no logits are wanted), in GFLOP; attention's matmuls excluded.
  double gemm_gflop = 0;
  /// gemm_gflop / prefill_seconds: the GEMM rate the whole prefill achieves (GFLOP/s).
  double gemm_gflops = 0;
  /// The machine's matmul limit at the compute dtype, measured in the same run: the best of 10
  /// products [2048, hidden] x [hidden, 2 intermediate] (the model's gate/up shape) on every core
  /// (libtorch's mm: OpenBLAS at fp32, oneDNN at bf16), GFLOP/s; 0 on a GPU (not measured).
  double matmul_limit_gflops = 0;
  double limit_ratio = 0;  ///< gemm_gflops / matmul_limit_gflops (issue 40's target: >= 0.6 at 2K-token batches)
  std::string to_json() const;
  std::string to_text() const;
};
/// Reads the first `docs` documents of `o.corpus`, times LlamaModel::forward alone on the batches
/// precompute would build, then `rounds` times a full precompute of the same documents into a
/// fresh temporary store (deleted afterwards; o.store is ignored) followed by the bare forward
/// again (A B A B ... A: on a shared machine the speed drifts, and each full run is compared with
/// the bare runs on either side of it). rounds >= 1.
Status bench_precompute(const PrecomputeOptions& o, uint64_t docs, BenchResult* out, int rounds = 1);

}  // namespace ucm::precompute
