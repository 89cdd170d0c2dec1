// cmd/tokenize.cc: `ucm tokenize` parses arguments and calls ucm::tokenize::run_tokenize.
#include "tokenize_cmd.h"

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_common.h"
#include "ucm/token_ids/token_ids.h"

namespace ucm::cli {
namespace {

struct TokenizeArgs {
  tokenize::TokenizeOptions o;
  CommonFlags common;
};

void run(const TokenizeArgs& a) {
  tokenize::TokenizeReport rep;
  // Plain runs stream a token-ids corpus (one JSONL line per document) and keep no ids.
  const bool stream = !a.common.json && a.o.compare_file.empty();
  auto on_doc = [&](const tokenize::DocumentTokens& d) {
    if (!stream) return;
    nlohmann::ordered_json j;
    j["id"] = d.id;
    j["source"] = d.source;
    j["token_ids"] = d.ids;
    const std::string line = j.dump() + "\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
  };
  Status st = tokenize::run_tokenize(a.o, /*keep_ids=*/a.common.json, on_doc, &rep);
  if (stream) {
    std::fflush(stdout);
    if (st.ok()) messages().info("ucm tokenize: {} documents, {} tokens, {} skipped", rep.documents, rep.tokens,
                                 rep.skipped);
    for (const auto& r : rep.skipped_reasons) messages().warn("ucm tokenize: skipped {}", r);
    if (!st.ok()) {
      print_error("tokenize", st);
      throw CLI::RuntimeError(admin::exit_code(st));
    }
  } else {
    finish("tokenize", a.common, st, rep, true);
  }
  if (rep.comparing && (rep.differ > 0 || rep.missing > 0)) {
    messages().warn("ucm tokenize: {} of {} documents differ from {}, {} missing there: a server tokenizing like that "
                    "file misses the blocks after the difference; precompute from its ids (\"token_ids\" entries, "
                    "`python -m ucm.tokenize`, docs/python.md)",
                    rep.differ, rep.compared, a.o.compare_file, rep.missing);
    throw CLI::RuntimeError(admin::kExitDiffer);
  }
}

void add_tokenize_options(CLI::App* sub, TokenizeArgs* a) {
  sub->add_option("--model", a->o.model_dir, "Model directory holding tokenizer.json");
  sub->add_option("--tokenizer", a->o.tokenizer_file, "tokenizer.json (default: MODEL/tokenizer.json)");
  sub->add_option("--corpus", a->o.corpus, "JSONL file or directory of text files (docs/corpus.md)")->required();
  sub->add_option("--corpus-suffix", a->o.corpus_suffix, "Directory corpora: only files whose name ends with this");
  sub->add_option("--template", a->o.template_file, "Prompt template, as for ucm precompute");
  sub->add_option("--compare", a->o.compare_file,
                  "JSONL of {\"id\", \"token_ids\"} (e.g. from `python -m ucm.tokenize`): compare per document; "
                  "exit 6 if any differs or is missing");
  sub->add_option("--limit", a->o.limit, "Stop after N documents (default all)");
}

}  // namespace

CLI::App* setup_tokenize(CLI::App& app) {
  return add_command(app, "tokenize", run, add_tokenize_options,
                     "ucm's token ids of a corpus (template + document), as precompute hashes them; with --compare, "
                     "whether a server's ids (JSONL of {id, token_ids}) equal them, and where they first differ");
}

}  // namespace ucm::cli
