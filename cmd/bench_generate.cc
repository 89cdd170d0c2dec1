// cmd/bench_generate.cc: `ucm bench generate`: precomputes the document into the scratch store
// (ucm::precompute, the producer side), then times the engine on it (ucm::generate::bench_generate,
// which reaches the store through libucm's C ABI only).
#include "torch_commands.h"
#include "bench_generate_cmd.h"

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include <spdlog/spdlog.h>

#include "cli_common.h"
#include "ucm/generate/generate.h"
#include "ucm/precompute/precompute.h"
#include "ucm/fs.h"

namespace ucm::cli {
namespace {

struct Points {
  std::vector<generate::BenchGeneratePoint> v;
  std::string to_json() const {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& p : v)
      a.push_back({{"prefix_tokens", p.prefix_tokens}, {"hit_tokens", p.hit_tokens},
                   {"ttft_cached_ms", p.ttft_cached_ms}, {"load_ms", p.load_ms},
                   {"ttft_recompute_ms", p.ttft_recompute_ms}, {"speedup", p.speedup},
                   {"first_token_match", p.tokens_match}});
    return nlohmann::json{{"points", a}}.dump();
  }
  std::string to_text() const {
    std::string s = "prefix  hit    TTFT cached   (load)    TTFT recompute   speedup  same first token\n";
    char buf[200];
    for (const auto& p : v) {
      std::snprintf(buf, sizeof buf, "%6u %6u %10.1f ms %8.1f ms %12.1f ms %8.1fx  %s\n", p.prefix_tokens,
                    p.hit_tokens, p.ttft_cached_ms, p.load_ms, p.ttft_recompute_ms, p.speedup,
                    p.tokens_match ? "yes" : "NO");
      s += buf;
    }
    return s + "target: >= 20x at 8K\n";
  }
};

// Precomputes o.corpus_file into o.store with precompute's defaults (the fingerprint the bench
// looks up), as a one-file directory corpus; blocks already stored are kept.
Status precompute_document(const generate::BenchGenerateOptions& o) {
  namespace fs = std::filesystem;
  const fs::path corpus_dir = fs::path(o.store).string() + ".corpus";
  precompute::PrecomputeOptions po;
  po.model_dir = o.model_dir;
  po.tokenizer_file = o.tokenizer_file;
  po.corpus = corpus_dir.string();
  po.store = o.store;
  po.template_file = o.template_file;
  po.resume = true;
  po.handle_signals = false;
  precompute::PrecomputeSummary sum;
  Status st;
  try {
    fs::create_directories(corpus_dir);
    fs::copy_file(o.corpus_file, corpus_dir / fs::path(o.corpus_file).filename(), fs::copy_options::overwrite_existing);
  } catch (const fs::filesystem_error& e) {
    st = Status::InvalidArgument("--document " + o.corpus_file + ": " + e.what());
  }
  if (st.ok()) st = precompute::run_precompute(po, precompute::Resources{}, &sum);
  std::error_code ec;
  ucm::remove_tree(corpus_dir, ec);
  if (st.ok())
    spdlog::info("bench generate: precomputed {} blocks ({} already stored)", sum.blocks_written, sum.blocks_existing);
  return st;
}

}  // namespace

void setup_bench_generate(CLI::App& bench) {
  struct Args {
    generate::BenchGenerateOptions o;
    std::string prefixes = "1024,4096,8192";
    bool keep = false;
    CommonFlags common;
  };
  auto a = std::make_shared<Args>();
  a->o.model_dir = "models/SmolLM2-135M-Instruct";
  a->o.template_file = "configs/template_chat.txt";
  a->o.corpus_file = "/usr/share/doc/python3.11/html/_sources/library/functions.rst.txt";
  CLI::App* c = bench.add_subcommand("generate", torch_description("bench", "generate"));
  c->add_option("--model", a->o.model_dir, "Model directory")->capture_default_str();
  c->add_option("--store", a->o.store, "Scratch store directory (default: a temporary one, removed after)");
  c->add_option("--document", a->o.corpus_file, "A document of at least the longest prefix in tokens")
      ->capture_default_str();
  c->add_option("--template", a->o.template_file, "Prompt template")->capture_default_str();
  c->add_option("--prefix", a->prefixes, "Cached prefix lengths in tokens, comma-separated")->capture_default_str();
  c->add_option("--repeats", a->o.repeats, "Runs per length (median reported)")->capture_default_str();
  add_common_flags(c, &a->common);
  c->callback([a] {
    Points pts;
    Status st;
    a->o.prefix_tokens.clear();
    try {
      size_t pos = 0;
      const std::string& s = a->prefixes;
      while (pos <= s.size()) {
        size_t e = s.find(',', pos);
        if (e == std::string::npos) e = s.size();
        a->o.prefix_tokens.push_back(uint32_t(std::stoul(s.substr(pos, e - pos))));
        pos = e + 1;
      }
    } catch (const std::exception&) {
      st = Status::InvalidArgument("--prefix: expected comma-separated token counts, got '" + a->prefixes + "'");
    }
    bool temp = false;
    if (st.ok() && a->o.store.empty()) {
      a->o.store = (std::filesystem::temp_directory_path() / ("ucm-bench-generate-" + std::to_string(getpid()))).string();
      temp = true;
    }
    if (st.ok()) st = precompute_document(a->o);
    if (st.ok()) st = generate::bench_generate(a->o, &pts.v);
    if (temp) {
      std::error_code ec;
      ucm::remove_tree(a->o.store, ec);
    }
    finish("bench generate", a->common, st, pts, st.ok());
  });
}

}  // namespace ucm::cli
