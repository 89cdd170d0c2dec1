// pipelines/precompute/precompute.cc: run_precompute (precompute.h; docs/precompute.md): checks
// the options, opens the corpus, loads the model and tokenizer, opens the store, sets up the
// namespace, and runs the pipeline (runner.cc). The other parts: internal.h.
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <torch/torch.h>

#include "ucm/model/compute.h"
#include "compute_report.h"
#include "precompute_internal.h"
#include "ucm/model/llama_model.h"
#include "ucm/model/model_load.h"
#include "signals.h"
#include "ucm/sglang_pages.h"
#include "ucm/tok/tokenizer.h"

namespace ucm::precompute {
namespace detail {

namespace fs = std::filesystem;

Status load_model(const PrecomputeOptions& o, const Resources& res,
                  std::unique_ptr<model::LlamaModel>* owned, const model::LlamaModel** m, ComputeInfo* compute) {
  if (res.model) {
    *m = res.model;
    const bool bf16 = res.model->compute_dtype() == torch::kBFloat16;
    *compute = {bf16 ? "bf16" : "fp32", bf16 ? "given" : "fp32", at::get_num_threads(),
                model::kernels_of(*res.model),
                model::blas_core_of(res.model->device(), res.model->compute_dtype()), ""};
    if (!compute->blas_core.empty()) compute->blas_core_replaced = model::blas_core_replaced();
    return Status::OK();
  }
  if (o.model_dir.empty()) return Status::InvalidArgument("no model directory: pass --model DIR (or `model:` in --config)");
  if (o.threads < 0) return Status::InvalidArgument("--threads must be >= 0 (0: the default for the compute dtype)");
  model::LoadOptions lo;
  lo.model_dir = o.model_dir;
  lo.device = o.device;
  lo.compute_dtype = o.compute_dtype;
  lo.threads = o.threads;
  Status st = model::load_model(lo, owned, compute);
  if (!st.ok()) return st;
  *m = owned->get();
  return Status::OK();
}

Status load_tokenizer(const PrecomputeOptions& o, const Resources& res, std::unique_ptr<tok::Tokenizer>* owned,
                      const tok::Tokenizer** t) {
  if (res.tokenizer) {
    *t = res.tokenizer;
    return Status::OK();
  }
  std::string path = o.tokenizer_file.empty() ? (fs::path(o.model_dir) / "tokenizer.json").string() : o.tokenizer_file;
  if (!fs::exists(path))
    return Status::InvalidArgument("tokenizer file " + path +
                                   " not found: pass --tokenizer FILE, or re-run scripts/fetch_model.py to write it");
  try {
    *owned = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_file(path));
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("cannot load tokenizer ") + path + ": " + e.what());
  }
  *t = owned->get();
  return Status::OK();
}

}  // namespace detail

using namespace detail;

Status run_precompute(const PrecomputeOptions& o, const Resources& res, PrecomputeSummary* sum) {
  *sum = PrecomputeSummary{};
  Status st = validate(o);
  if (!st.ok()) return st;
  if (o.store.empty()) return Status::InvalidArgument("no store: pass --store DIR");
  std::unique_ptr<DocSource> src;
  const DocSourceOptions so = source_options(o);
  st = open_doc_source(so, &src);
  if (!st.ok()) return st;

  std::unique_ptr<model::LlamaModel> model_owned;
  const model::LlamaModel* m = nullptr;
  ComputeInfo compute;
  st = load_model(o, res, &model_owned, &m, &compute);
  if (!st.ok()) return st;
  set_compute(compute, sum);
  if (m->config().head_dim <= 0 || m->config().num_key_value_heads <= 0)
    return Status::InvalidArgument("model " + o.model_dir + " has no KV heads / head_dim");
  std::unique_ptr<tok::Tokenizer> tok_owned;
  const tok::Tokenizer* tk = nullptr;
  st = load_tokenizer(o, res, &tok_owned, &tk);
  if (!st.ok()) return st;

  OpenOptions oo;
  oo.mode = OpenOptions::Mode::kReadWrite;
  oo.create_if_missing = true;
  oo.shard = o.shard_name;
  if (oo.shard.empty() && o.shard_count > 1) oo.shard = "precompute-" + std::to_string(o.shard_index);
  std::unique_ptr<Store> store;
  st = Store::Open(o.store, oo, &store);
  if (!st.ok()) return Status(st.code(), "opening store " + o.store + ": " + st.message());

  NamespaceId ns{};
  NamespaceDesc desc;
  std::vector<float> proj;
  st = setup_namespace(store.get(), *m, o, sum, &ns, &desc, &proj);
  if (!st.ok()) return st;

  ChunkPrefix chunk;
  if (o.chunks) {
    st = template_chunk_prefix(*tk, src->prefix(), src->suffix(), &chunk.template_ids);
    if (!st.ok()) return st;
    if (!o.template_file.empty()) {  // the template fixes the prefix: checked (or stored) before any work
      st = put_chunk_attachments(store.get(), *m, ns, chunk.template_ids);
      if (!st.ok()) return st;
      chunk.known = true;
      chunk.ids = chunk.template_ids;
    } else {  // token-ids entries may bring it: taken from the store, else from the first document
      st = stored_chunk_prefix(store.get(), ns, &chunk.ids, &chunk.known);
      if (!st.ok()) return st;
    }
  }

  const uint64_t total = (o.progress || ::isatty(STDERR_FILENO)) ? count_documents(so) : 0;
  SignalScope sig(o.handle_signals);
  st = run_pipeline(o, *m, *tk, store.get(), ns, desc.hash_seed(), proj, chunk, src.get(),
                    o.limit ? std::min<uint64_t>(o.limit, total) : total, sum);
  if (st.ok() && o.sglang_page_size && !sum->interrupted) {
    SglangPagesBuildReport r;
    st = build_sglang_pages(store.get(), ns, o.sglang_page_size, &r);
    if (!st.ok()) return Status(st.code(), "SGLang page table: " + st.message());
    sum->sglang_page_size = o.sglang_page_size;
    sum->sglang_pages = r.pages;
  }
  return st;
}

}  // namespace ucm::precompute
