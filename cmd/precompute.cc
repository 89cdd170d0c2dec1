// cmd/precompute.cc: `ucm precompute` parses arguments and calls ucm::precompute::run_precompute.
#include "torch_commands.h"
#include "precompute_cmd.h"

#include <csignal>
#include <memory>
#include <string>

#include "cli_common.h"
#include "ucm/precompute/precompute.h"

namespace ucm::cli {
namespace {

struct PrecomputeArgs {
  std::string config, model, tokenizer, corpus, corpus_suffix, store, tmpl, ns_name, dtype, shard, shard_name, dense,
      device, compute_dtype;
  int threads = 0;
  uint32_t block_size = 16, hash_bits = 128;
  uint64_t limit = 0, batch_tokens = 4096, max_doc_tokens = 0;
  uint32_t sglang_page_size = 0;
  bool resume = false, strict = false, chunks = false;
  CommonFlags common;
  // options given on the command line (override --config)
  std::vector<std::pair<std::string, CLI::Option*>> given;
};

bool was_given(const PrecomputeArgs& a, const std::string& name) {
  for (const auto& [n, o] : a.given)
    if (n == name) return o->count() > 0;
  return false;
}

void run(const PrecomputeArgs& a) {
  using namespace ucm::precompute;
  PrecomputeOptions o;
  PrecomputeSummary sum;
  auto fail = [&](const Status& st) { finish("precompute", a.common, st, sum, false); };
  if (!a.config.empty()) {
    Status st = load_config(a.config, &o);
    if (!st.ok()) fail(st);
  }
  auto set_str = [&](const char* name, const std::string& v, std::string* dst) {
    if (was_given(a, name)) *dst = v;
  };
  set_str("model", a.model, &o.model_dir);
  set_str("tokenizer", a.tokenizer, &o.tokenizer_file);
  set_str("corpus", a.corpus, &o.corpus);
  set_str("corpus-suffix", a.corpus_suffix, &o.corpus_suffix);
  set_str("store", a.store, &o.store);
  set_str("template", a.tmpl, &o.template_file);
  set_str("namespace-name", a.ns_name, &o.fingerprint.namespace_name);
  set_str("device", a.device, &o.device);
  set_str("compute-dtype", a.compute_dtype, &o.compute_dtype);
  if (was_given(a, "threads")) o.threads = a.threads;
  // Batches sized for a GPU unless the command line says otherwise: 8x the CPU default.
  if (o.device != "cpu" && !was_given(a, "batch-tokens") && o.batch_tokens == 4096) o.batch_tokens = 32768;
  if (was_given(a, "block-size")) o.fingerprint.block_size = a.block_size;
  if (was_given(a, "hash-bits")) o.fingerprint.hash_bits = a.hash_bits;
  if (was_given(a, "limit")) o.limit = a.limit;
  if (was_given(a, "batch-tokens")) o.batch_tokens = a.batch_tokens;
  if (was_given(a, "max-doc-tokens")) o.max_doc_tokens = a.max_doc_tokens;
  if (a.resume) o.resume = true;
  if (was_given(a, "sglang-page-size")) o.sglang_page_size = a.sglang_page_size;
  if (a.chunks) o.chunks = true;
  if (a.strict) o.strict = true;
  o.progress = a.common.progress;
  set_str("dtype", a.dtype, &o.fingerprint.dtype);  // checked by run_precompute (validate)
  if (was_given(a, "shard")) {
    Status st = parse_shard(a.shard, &o.shard_index, &o.shard_count);
    if (!st.ok()) fail(Status::InvalidArgument("--shard: " + st.message()));
  }
  set_str("shard-name", a.shard_name, &o.shard_name);
  if (was_given(a, "dense-layers")) {
    Status st = parse_layers(a.dense, &o.fingerprint.dense_layers);
    if (!st.ok()) fail(Status::InvalidArgument("--dense-layers: " + st.message()));
  }
  Status st = run_precompute(o, Resources{}, &sum);
  // The summary is printed even after an error: what was committed stays committed.
  finish("precompute", a.common, st, sum, st.ok() || sum.documents > 0);
  // Stopped by SIGINT/SIGTERM after a clean finish of the in-flight batches: the summary is printed
  // ("interrupted": true) and the exit status is the shell's 128 + signal (130, 143), so scripts see
  // that the run is incomplete (re-run with --resume).
  if (sum.interrupted) throw CLI::RuntimeError(128 + (sum.signal > 0 ? sum.signal : SIGINT));
}

void add_precompute_options(CLI::App* sub, PrecomputeArgs* a) {
  auto add = [&](const std::string& flag, const std::string& name, auto* var, const std::string& help) {
    CLI::Option* o = sub->add_option(flag, *var, help);
    a->given.emplace_back(name, o);
    return o;
  };
  sub->add_option("--config", a->config, "YAML options (configs/precompute.yaml); command-line flags override it")
      ->check(CLI::ExistingFile);
  add("--model", "model", &a->model, "Hugging Face model directory (config.json + safetensors)");
  add("--tokenizer", "tokenizer", &a->tokenizer, "tokenizer.json (default: MODEL/tokenizer.json)");
  add("--corpus", "corpus", &a->corpus, "JSONL file of {id, text, source} or a directory of text files");
  add("--corpus-suffix", "corpus-suffix", &a->corpus_suffix,
      "Directory corpora: only files whose name ends with this (e.g. .rst.txt; default all files)");
  add("--store", "store", &a->store, "Store directory (created if missing)");
  add("--template", "template", &a->tmpl,
      "Prompt template file: text before {document} (and after it); without {document} all of it is the prefix");
  add("--namespace-name", "namespace-name", &a->ns_name,
      "Name of the namespace (default <model>/<dtype>/b<block>/<id8>); needed to add a second "
      "fingerprint of the same model to a store");
  add("--block-size", "block-size", &a->block_size, "Tokens per block (default 16)")->check(CLI::Range(1, 4096));
  add("--dtype", "dtype", &a->dtype, "Payload dtype: bf16 (default), fp16, fp32");
  add("--hash-bits", "hash-bits", &a->hash_bits, "R4 sign-hash bits per token, multiple of 8 (default 128)");
  add("--dense-layers", "dense-layers", &a->dense, "Layers servers keep dense, e.g. 0,1 (default 0,1)");
  add("--limit", "limit", &a->limit, "Stop after N documents of this shard (default all)");
  add("--shard", "shard", &a->shard,
      "Process shard I of N (documents with index % N == I), e.g. 0/4. On a sharded store (or a missing "
      "one, created sharded) this worker writes its own writer shard, precompute-I: N workers on any "
      "machines write one store in parallel, with no merge step");
  add("--shard-name", "shard-name", &a->shard_name,
      "The writer shard of a sharded store this run writes (default: precompute-I with --shard I/N, "
      "else $UCM_SHARD or the host name)");
  add("--batch-tokens", "batch-tokens", &a->batch_tokens, "Padded tokens per prefill batch (default 4096; 32768 with --device cuda)")
      ->check(CLI::PositiveNumber);
  add("--device", "device", &a->device,
      "Where prefill runs: cpu (default), cuda or cuda:N (needs ucm built with a CUDA libtorch, e.g. "
      "PyTorch's; docs/precompute.md)");
  add("--compute-dtype", "compute-dtype", &a->compute_dtype,
      "GEMM dtype of the prefill: fp32 (default), bf16 (fp32 accumulation; on a CPU with AMX-BF16 about 1.4-2x "
      "fp32's speed, AVX512-BF16 on AMD 2.5x; refused on CPUs without bf16 units) or auto (bf16 where it beats "
      "fp32: AMX-BF16, or AVX512-BF16 on AMD). The stored K/V are in --dtype either way; the report says which ran "
      "(docs/model.md, \"Compute dtype\")")
      ->check(CLI::IsMember({"auto", "bf16", "fp32"}));
  add("--threads", "threads", &a->threads,
      "Prefill workers on the CPU (default 0: one per core), each with one libtorch thread and, at fp32, its "
      "GEMMs on OpenBLAS in its own thread; a worker whose sequences are done helps the others (docs/model.md). "
      "With UCM_FP32_KERNELS=0, fp32 runs one libtorch thread beside OpenBLAS's own; OMP_NUM_THREADS also sets it")
      ->check(CLI::NonNegativeNumber);
  add("--max-doc-tokens", "max-doc-tokens", &a->max_doc_tokens,
      "Cut longer documents (template included) here (default: max_position_embeddings)");
  add("--sglang-page-size", "sglang-page-size", &a->sglang_page_size,
      "Also build the namespace's SGLang page table for this page size (SGLang's --page-size, a multiple of "
      "--block-size), so SGLang's HiCache (the ucm.sglang backend) finds the blocks: ucm sglang-pages, "
      "store_v1.md §12.1")
      ->check(CLI::PositiveNumber);
  sub->add_flag("--resume", a->resume, "Skip documents already registered in the namespace");
  sub->add_flag("--chunks", a->chunks,
                "Store each document as a chunk, reusable at any position of a prompt (ucm generate --blend): "
                "the template's prefix then the document, tokenized apart, registered as chunk:<id> "
                "(store_v1.md §4.4)");
  sub->add_flag("--strict", a->strict, "Malformed corpus lines and invalid UTF-8 are fatal (default: skipped)");
}

}  // namespace

CLI::App* setup_precompute(CLI::App& app) {
  return add_command(app, "precompute", run, add_precompute_options, torch_description("", "precompute"));
}

}  // namespace ucm::cli
