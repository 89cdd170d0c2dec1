// cmd/eval.cc: `ucm eval retrieval` parses arguments and calls ucm::generate::eval_retrieval.
#include "torch_commands.h"
#include "eval_cmd.h"

#include <unistd.h>

#include <memory>
#include <sstream>
#include <string>
#include <type_traits>

#include "cli_common.h"
#include "ucm/generate/eval.h"
#include "ucm/strings.h"

namespace ucm::cli {
namespace {

// "a,b,c" -> items (double, uint32_t or std::string); InvalidArgument(`bad`) when there is none
// or one does not parse.
template <class T>
Status split_list(const std::string& s, std::vector<T>* out, const std::string& bad) {
  out->clear();
  for (const std::string& item : split_comma(s)) {
    if (item.empty()) continue;
    try {
      if constexpr (std::is_same_v<T, double>) out->push_back(std::stod(item));
      else if constexpr (std::is_same_v<T, uint32_t>) out->push_back(uint32_t(std::stoul(item)));
      else out->push_back(item);
    } catch (const std::exception&) {
      return Status::InvalidArgument(bad);
    }
  }
  return out->empty() ? Status::InvalidArgument(bad) : Status::OK();
}

void add_eval_retrieval(CLI::App* eval) {
  struct Args {
    generate::EvalRetrievalOptions o;
    std::string documents, budgets = "0.025,0.05,0.1,0.2,0.3", taus = "0.8,0.9,0.95,0.98",
                           policies = "esa,quest,gsa,psa";
    CommonFlags common;
  };
  auto a = std::make_shared<Args>();
  a->o.model_dir = "models/SmolLM2-135M-Instruct";
  a->o.template_file = "configs/template_chat.txt";
  CLI::App* c = eval->add_subcommand(
      "retrieval",
      "Attention-mass recall R of each retrieval policy against the oracle R*, and k_tau, on real documents "
      "(contexts of 2K-8K tokens) with real queries at held-out continuation positions (docs/retrieval.md)");
  c->add_option("--store", a->o.store, "A store precomputed from the corpus (ucm precompute)")->required();
  c->add_option("--model", a->o.model_dir, "Model directory")->capture_default_str();
  c->add_option("--template", a->o.template_file, "Prompt template (as given to precompute)")->capture_default_str();
  c->add_option("--corpus", a->o.corpus, "Corpus directory")->capture_default_str();
  c->add_option("--corpus-suffix", a->o.corpus_suffix, "File-name suffix")->capture_default_str();
  c->add_option("--documents", a->documents, "Documents (paths under the corpus, comma-separated; default: the first that fit)");
  c->add_option("--max-documents", a->o.max_documents, "Documents to evaluate")->capture_default_str();
  c->add_option("--min-context", a->o.min_context, "Shortest context in tokens")->capture_default_str();
  c->add_option("--max-context", a->o.max_context, "Longest context in tokens")->capture_default_str();
  c->add_option("--queries", a->o.queries, "Held-out continuation positions per document")->capture_default_str();
  c->add_option("--budgets", a->budgets, "Budgets as fractions of the context blocks")->capture_default_str();
  c->add_option("--taus", a->taus, "Recall thresholds for k_tau and PSA")->capture_default_str();
  c->add_option("--policies", a->policies, "Policies (esa, quest, gsa, psa)")->capture_default_str();
  c->add_option("--retrieval-config", a->o.retrieval_config, "Retriever settings (windows): configs/retrieval.yaml")
      ->check(CLI::ExistingFile);
  c->add_option("--csv", a->o.csv, "Write every row (per layer and per layer group) here");
  add_common_flags(c, &a->common);
  c->callback([a] {
    generate::EvalRetrievalResult r;
    Status st = split_list(a->budgets, &a->o.budgets, "--budgets: expected numbers like 0.05,0.1");
    if (st.ok()) st = split_list(a->taus, &a->o.taus, "--taus: expected numbers like 0.9,0.95");
    if (st.ok()) st = split_list(a->policies, &a->o.policies, "--policies: empty");
    if (st.ok() && !a->documents.empty()) (void)split_list(a->documents, &a->o.documents, "");
    if (st.ok()) st = generate::eval_retrieval(a->o, &r);
    finish("eval retrieval", a->common, st, r, st.ok());
  });
}

void add_eval_blend(CLI::App* eval) {
  struct BlendArgs {
    generate::EvalBlendOptions o;
    std::string documents, sizes = "2,4,8", ratios = "0,0.05,0.15,0.3", decays = "128", prompts = "2",
                selections = "relevance,deviation";
    CommonFlags common;
  };
  auto b = std::make_shared<BlendArgs>();
  b->o.model_dir = "models/SmolLM2-135M-Instruct";
  CLI::App* bl = eval->add_subcommand(
      "blend",
      "RAG reuse (CacheBlend): prompts of 2, 4 and 8 stored documents plus a question served by full recompute, "
      "prefix caching and blending at each recompute ratio, in one run; TTFT, share of the prompt served from "
      "the store, and top-1 agreement and KL against full recompute (docs/blend.md)");
  auto* store_opt = bl->add_option("--store", b->o.store, "A store whose documents were precomputed with --chunks");
  bl->add_option("--model", b->o.model_dir, "Model directory")->capture_default_str();
  bl->add_option("--config", b->o.precompute_config, "The precompute YAML the store was built with (fingerprint)")
      ->check(CLI::ExistingFile);
  auto* docs_opt =
      bl->add_option("--documents", b->documents, "Document files, comma-separated, in order (each stored as a chunk)");
  bl->add_option("--from-csv", b->o.from_csv,
                 "Run nothing: read the rows of an earlier --csv and draw --png from them (and print the means)")
      ->check(CLI::ExistingFile)
      ->excludes(store_opt)
      ->excludes(docs_opt);
  bl->add_option("--sizes", b->sizes, "Documents per prompt")->capture_default_str();
  bl->add_option("--prompts", b->prompts,
                 "Prompts per size (consecutive windows of the documents): one number, or one per size")
      ->capture_default_str();
  bl->add_option("--ratios", b->ratios, "Recompute ratios")->capture_default_str();
  bl->add_option("--selections", b->selections,
                 "Selections compared: relevance (the question's attention), deviation (CacheBlend's V deviation), "
                 "both (docs/blend.md)")
      ->capture_default_str();
  bl->add_option("--check-layer", b->o.check_layer,
                 "Layers before this one run over every token (default: 0 for relevance, 1 for deviation and both)")
      ->check(CLI::NonNegativeNumber);
  bl->add_option("--position-decays", b->decays,
                 "Selection priors compared: a token's score is weighted by exp(-its position in its document / "
                 "decay); 0 = no prior (docs/blend.md)")
      ->capture_default_str();
  bl->add_option("--relevance-exponent", b->o.relevance_exponent,
                 "relevance and both: the score is the question's attention to the token to this power")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  bl->add_flag("--oracle", b->o.oracle,
               "Also choose the tokens by their deviation over all later layers, measured against the full "
               "recompute: the upper bound of selection by deviation (not a way to serve)");
  bl->add_option("--new-tokens", b->o.new_tokens, "Teacher-forced steps compared")->capture_default_str();
  bl->add_option("--question", b->o.question, "The text after the documents (used as given)");
  bl->add_option("--csv", b->o.csv, "Write every row and the means here");
  bl->add_option("--png", b->o.png, "Draw quality and TTFT against the recompute ratio here (gnuplot)");
  add_common_flags(bl, &b->common);
  bl->callback([b] {
    generate::EvalBlendResult r;
    b->o.progress = b->common.progress || ::isatty(2);
    Status st = split_list(b->sizes, &b->o.sizes, "--sizes: expected numbers like 2,4,8");
    if (st.ok()) st = split_list(b->ratios, &b->o.ratios, "--ratios: expected numbers like 0,0.15");
    if (st.ok()) st = split_list(b->prompts, &b->o.prompts, "--prompts: expected numbers like 2 or 2,8,2");
    if (st.ok()) st = split_list(b->decays, &b->o.position_decays, "--position-decays: expected numbers like 0,128");
    if (st.ok())
      st = split_list(b->selections, &b->o.selections, "--selections: expected names like relevance,deviation");
    if (st.ok() && b->o.from_csv.empty())
      st = split_list(b->documents, &b->o.documents, "--documents: required (document files, comma-separated)");
    if (st.ok()) st = generate::eval_blend(b->o, &r);
    finish("eval blend", b->common, st, r, st.ok());
  });
}

}  // namespace

CLI::App* setup_eval(CLI::App& app) {
  CLI::App* eval = app.add_subcommand("eval", torch_description("", "eval"));
  eval->require_subcommand(1);
  add_eval_retrieval(eval);
  add_eval_blend(eval);
  return eval;
}

}  // namespace ucm::cli
