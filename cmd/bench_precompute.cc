// cmd/bench_precompute.cc: `ucm bench precompute` calls ucm::precompute::bench_precompute.
#include "torch_commands.h"
#include "bench_precompute_cmd.h"

#include <memory>
#include <string>

#include "cli_common.h"
#include "ucm/precompute/precompute.h"

namespace ucm::cli {

void setup_bench_precompute(CLI::App& bench) {
  struct Args {
    precompute::PrecomputeOptions o;
    uint64_t docs = 24;
    int rounds = 1;
    CommonFlags common;
  };
  auto a = std::make_shared<Args>();
  a->o.model_dir = "models/SmolLM2-135M-Instruct";
  a->o.corpus = "/usr/share/doc/python3.11/html/_sources";
  a->o.corpus_suffix = ".rst.txt";
  a->o.template_file = "configs/template_chat.txt";
  // 24 documents cut at 512 tokens: ~11K tokens in 3 batches of 4096 padded tokens (the pipeline
  // overlaps a batch's conversion, representations and dumps with the next batch's prefill).
  a->o.max_doc_tokens = 512;
  CLI::App* c = bench.add_subcommand("precompute", torch_description("bench", "precompute"));
  c->add_option("--model", a->o.model_dir, "Model directory")->capture_default_str();
  c->add_option("--corpus", a->o.corpus, "Corpus (JSONL or directory)")->capture_default_str();
  c->add_option("--corpus-suffix", a->o.corpus_suffix, "Directory corpora: file-name suffix")->capture_default_str();
  c->add_option("--template", a->o.template_file, "Prompt template file (\"\" = none)")->capture_default_str();
  c->add_option("--docs", a->docs, "Documents to read")->capture_default_str()->check(CLI::PositiveNumber);
  c->add_option("--rounds", a->rounds,
                "Full precompute runs, each followed by a bare prefill (A B A B ... A); the ratio is the "
                "medians' (full over bare tokens/s)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  c->add_option("--batch-tokens", a->o.batch_tokens, "Padded tokens per batch")->capture_default_str();
  c->add_option("--max-doc-tokens", a->o.max_doc_tokens, "Cut documents here (0 = model maximum)")
      ->capture_default_str();
  c->add_option("--dtype", a->o.fingerprint.dtype, "Payload dtype")->capture_default_str();
  c->add_option("--device", a->o.device, "Where prefill runs: cpu, cuda or cuda:N (a CUDA libtorch)")
      ->capture_default_str();
  c->add_option("--compute-dtype", a->o.compute_dtype, "GEMM dtype: auto, bf16 or fp32 (as precompute)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "bf16", "fp32"}));
  c->add_option("--threads", a->o.threads,
                 "Prefill workers on the CPU (0: one per core, helping each other; as precompute's --threads)")
      ->capture_default_str();
  add_common_flags(c, &a->common);
  c->callback([a] {
    precompute::BenchResult r;
    Status st = precompute::bench_precompute(a->o, a->docs, &r, a->rounds);
    finish("bench precompute", a->common, st, r, st.ok());
  });
}

}  // namespace ucm::cli
