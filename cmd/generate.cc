// cmd/generate.cc: `ucm generate` parses arguments and calls ucm::generate::run_generate.
#include "torch_commands.h"
#include "generate_cmd.h"

#include <memory>
#include <string>

#include "cli_common.h"
#include "ucm/generate/generate.h"

namespace ucm::cli {

CLI::App* setup_generate(CLI::App& app) {
  struct Args {
    generate::GenerateOptions o;
    bool ignore_eos = false, no_recompute = false;
    CommonFlags common;
  };
  auto a = std::make_shared<Args>();
  a->o.common.model_dir = "models/SmolLM2-135M-Instruct";
  CLI::App* sub = app.add_subcommand("generate", torch_description("", "generate"));
  sub->add_option("--model", a->o.common.model_dir, "Hugging Face model directory")->capture_default_str();
  sub->add_option("--tokenizer", a->o.common.tokenizer_file, "tokenizer.json (default: MODEL/tokenizer.json)");
  sub->add_option("--store", a->o.common.store, "Store directory (none: full recompute only)");
  sub->add_option("--compute-dtype", a->o.common.compute_dtype,
                  "GEMM dtype of the model: fp32 (default), bf16 (fp32 accumulation; needs AMX-BF16 or AVX512-BF16) "
                  "or auto (bf16 on AMX-BF16, or AVX512-BF16 on AMD; fp32 elsewhere)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "bf16", "fp32"}));
  auto* p = sub->add_option("--prompt", a->o.common.prompt, "Prompt text");
  auto* pf = sub->add_option("--prompt-file", a->o.common.prompt_file, "File holding the prompt text")
                 ->check(CLI::ExistingFile);
  p->excludes(pf);
  sub->add_option("--template", a->o.common.template_file,
                  "Prompt template (as given to precompute, e.g. configs/template_chat.txt)");
  sub->add_option("--max-new-tokens", a->o.common.max_new_tokens, "Tokens to generate")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub->add_flag("--no-cache", a->o.dense.no_cache, "Full recompute only: no lookup, no load");
  sub->add_flag("--no-recompute", a->no_recompute,
                "Skip the full-recompute comparison run (no TTFT ratio, no token check)");
  sub->add_flag("--save", a->o.dense.save,
                "Dump the new full blocks into the store (opens it as the writer; creates it when missing)");
  sub->add_option("--sparse", a->o.sparse.policy,
                  "Also decode with block-sparse attention (esa, quest, gsa, psa) and compare it with dense")
      ->check(CLI::IsMember({"esa", "quest", "gsa", "psa"}));
  sub->add_option("--retrieval-config", a->o.sparse.retrieval_config, "Retriever settings (configs/retrieval.yaml)")
      ->check(CLI::ExistingFile);
  sub->add_option("--config", a->o.common.precompute_config,
                  "The precompute YAML the store was built with (namespace fingerprint: block size, dtype, "
                  "hash bits, dense layers); default: precompute's defaults")
      ->check(CLI::ExistingFile);
  sub->add_option("--namespace", a->o.common.namespace_name, "Namespace by name or 32-hex id (default: the model's fingerprint)");
  sub->add_flag("--ignore-eos", a->ignore_eos, "Do not stop at the end-of-sequence token");
  auto* bl = sub->add_flag("--blend", a->o.blend.enabled,
                           "RAG reuse (CacheBlend, docs/blend.md): the prompt is the namespace's chunk prefix, the "
                           "--docs, then --prompt; stored documents are moved to their positions and a share of "
                           "their tokens recomputed. Compared with prefix caching and full recompute");
  sub->add_option("--docs", a->o.blend.docs, "--blend: documents, by corpus id (stored with precompute --chunks) or file")
      ->delimiter(',')
      ->needs(bl);
  sub->add_option("--recompute-ratio", a->o.blend.recompute_ratio,
                  "--blend: share of the stored document tokens recomputed (CacheBlend §4.3)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0))
      ->needs(bl);
  sub->add_option("--selection", a->o.blend.selection,
                  "--blend: what ranks the stored tokens to recompute: relevance (how much the question attends "
                  "to them), deviation (CacheBlend's V deviation at the check layer) or both (docs/blend.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"relevance", "deviation", "both"}))
      ->needs(bl);
  sub->add_option("--check-layer", a->o.blend.check_layer,
                  "--blend: layers before this one run over every token; the tokens to recompute are chosen here "
                  "(default: 0 for relevance, 1 for deviation and both)")
      ->check(CLI::NonNegativeNumber)
      ->needs(bl);
  sub->add_option("--position-decay", a->o.blend.position_decay,
                  "--blend: the selection weighs a token's score by exp(-its position in its document / this); "
                  "0 = no prior")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->needs(bl);
  sub->add_option("--relevance-exponent", a->o.blend.relevance_exponent,
                  "--blend, selection relevance or both: the score is the question's attention to the token to "
                  "this power; 0 = attention ignored")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->needs(bl);
  add_common_flags(sub, &a->common);
  sub->callback([a] {
    a->o.common.stop_at_eos = !a->ignore_eos;
    a->o.dense.recompute = !a->no_recompute;
    if (a->o.common.prompt.empty() && a->o.common.prompt_file.empty()) {
      generate::GenerateReport r;
      finish("generate", a->common, Status::InvalidArgument("pass --prompt TEXT or --prompt-file FILE"), r, false);
    }
    if (a->o.blend.enabled) {
      if (!a->o.sparse.policy.empty() || a->o.dense.save || a->o.dense.no_cache) {
        generate::BlendReport br;
        finish("generate", a->common, Status::InvalidArgument("--blend does not go with --sparse, --save or --no-cache"),
               br, false);
      }
      generate::BlendReport br;
      Status st = generate::run_blend(a->o.common, a->o.blend, &br);
      finish("generate", a->common, st, br, st.ok());
      return;
    }
    generate::GenerateReport r;
    Status st = generate::run_generate(a->o, &r);
    finish("generate", a->common, st, r, st.ok());
  });
  return sub;
}

}  // namespace ucm::cli
