// pipelines/generate/eval_blend.cc: `ucm eval blend` (see ucm/generate/eval.h, docs/blend.md).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "blend_engine.h"
#include "generate_internal.h"
#include "session.h"
#include "ucm/generate/eval.h"

namespace ucm::generate {

using namespace detail;

namespace {

Status write_csv(const std::string& path, const EvalBlendResult& r) {
  std::ofstream f(path);
  if (!f) return Status::IOError("cannot write " + path);
  f << "kind,size,prompt,method,ratio,position_decay,prompt_tokens,ttft_ms,served_fraction,top1_agreement,mean_kl,"
       "greedy_match\n";
  auto row = [&](const char* kind, const EvalBlendResult::Row& x) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s,%u,%u,%s,%.2f,%g,%llu,%.1f,%.4f,%.4f,%.5f,%llu\n", kind, x.size, x.prompt,
                  x.method.c_str(), x.ratio, x.position_decay, (unsigned long long)x.prompt_tokens, x.ttft_ms,
                  x.served_fraction, x.top1_agreement, x.mean_kl, (unsigned long long)x.greedy_match);
    f << buf;
  };
  for (const auto& x : r.rows) row("prompt", x);
  for (const auto& x : r.means) row("mean", x);
  return f ? Status::OK() : Status::IOError("writing " + path);
}

// Quality (top-1 agreement, KL) and TTFT against the recompute ratio: one colour per prompt size,
// a dash per selection (see style); prefix
// caching as a horizontal reference on the TTFT panel (log scale). One legend under the panels.
Status draw_png(const std::string& path, const EvalBlendResult& r) {
  FILE* g = ::popen("gnuplot 2>&1", "w");
  if (!g) return Status::IOError("cannot run gnuplot (apt-get install gnuplot-nox)");
  std::ostringstream s;
  std::map<uint32_t, std::vector<const EvalBlendResult::Row*>> by_size;
  std::vector<std::pair<std::string, double>> series;  // (method, decay) of the blend lines
  double max_ratio = 0;
  for (const auto& x : r.means) {
    by_size[x.size].push_back(&x);
    if (x.method.rfind("blend", 0) != 0 && x.method != "oracle") continue;
    max_ratio = std::max(max_ratio, x.ratio);
    const auto key = std::make_pair(x.method, x.position_decay);
    if (std::find(series.begin(), series.end(), key) == series.end()) series.push_back(key);
  }
  auto title = [&](uint32_t size, const std::pair<std::string, double>& k) {
    std::string t = std::to_string(size) + " docs ";
    if (k.first == "oracle") return t + "oracle selection";
    return t + k.first + (k.second > 0 ? ", prior " + std::to_string(int(k.second)) : ", no prior");
  };
  // Solid: the relevance selection; dashed: deviation; dash-dot: both; dotted: the oracle. Thinner
  // without a prior.
  auto style = [](const std::pair<std::string, double>& k) {
    const std::string dt = k.first == "oracle"            ? " dt 3"
                           : k.first == "blend-deviation" ? " dt 2"
                           : k.first == "blend-both"      ? " dt 4"
                                                          : " dt 1";
    return dt + (k.second > 0 || k.first == "oracle" ? " lw 2" : " lw 1");
  };
  s << "set terminal pngcairo size 1400,620 noenhanced\nset output '" << path << "'\n"
    << "set multiplot title 'CacheBlend on SmolLM2-135M, python3.11-doc (against full recompute)'\n"
    << "set grid\nset xlabel 'recompute ratio'\nset key off\nset xrange [0:" << std::max(max_ratio, 0.05) << "]\n";
  auto panel = [&](int i, const std::string& ptitle, const std::string& ylabel, auto value, bool ttft) {
    s << "set size 0.333,0.72\nset origin " << 0.333 * i << ",0.24\n"
      << (ttft ? "set logscale y\n" : "unset logscale y\n") << "set title '" << ptitle << "'\nset ylabel '" << ylabel
      << "'\nplot ";
    bool first = true;
    int colour = 0;
    for (const auto& [size, rows] : by_size) {
      ++colour;
      for (const auto& k : series) {
        s << (first ? "" : ", ") << "'-' using 1:2 with linespoints lc " << colour << style(k) << " title '"
          << title(size, k) << "'";
        first = false;
      }
      if (ttft) s << ", '-' using 1:2 with lines lw 1 lc " << colour << " dt 4 title '" << size << " docs prefix caching'";
    }
    s << "\n";
    for (const auto& [size, rows] : by_size) {
      for (const auto& k : series) {
        for (const auto* x : rows)
          if (x->method == k.first && x->position_decay == k.second) s << x->ratio << " " << value(*x) << "\n";
        s << "e\n";
      }
      if (ttft) {
        for (const auto* x : rows)
          if (x->method == "prefix") s << "0 " << value(*x) << "\n" << max_ratio << " " << value(*x) << "\n";
        s << "e\n";
      }
    }
  };
  panel(0, "teacher-forced top-1 agreement", "agreement", [](const EvalBlendResult::Row& x) { return x.top1_agreement; },
        false);
  panel(1, "mean KL of next-token distributions", "KL (nats)", [](const EvalBlendResult::Row& x) { return x.mean_kl; },
        false);
  // The third panel draws the legend for all three, in the band under them.
  s << "set key at screen 0.5,0.2 center top horizontal maxrows 4 width 2 font ',10'\n";
  panel(2, "TTFT", "ms (log scale)", [](const EvalBlendResult::Row& x) { return x.ttft_ms; }, true);
  s << "unset multiplot\n";
  const std::string script = s.str();
  std::fwrite(script.data(), 1, script.size(), g);
  const int rc = ::pclose(g);
  if (rc != 0) return Status::IOError("gnuplot failed drawing " + path + " (exit " + std::to_string(rc) + ")");
  return Status::OK();
}

// The rows of a CSV that write_csv wrote.
Status read_csv(const std::string& path, EvalBlendResult* r) {
  std::ifstream f(path);
  if (!f) return Status::NotFound("cannot read " + path);
  std::string line;
  std::getline(f, line);
  if (line.rfind("kind,size,prompt,method,ratio,position_decay,", 0) != 0)
    return Status::InvalidArgument(path + ": not a CSV of `ucm eval blend` (header: " + line + ")");
  size_t n = 1;
  while (std::getline(f, line)) {
    ++n;
    if (line.empty()) continue;
    std::vector<std::string> c;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, ',');) c.push_back(x);
    if (c.size() != 12 || (c[0] != "prompt" && c[0] != "mean"))
      return Status::InvalidArgument(path + ":" + std::to_string(n) + ": expected 12 fields, kind prompt or mean");
    EvalBlendResult::Row x;
    try {
      x.size = uint32_t(std::stoul(c[1]));
      x.prompt = uint32_t(std::stoul(c[2]));
      x.method = c[3];
      x.ratio = std::stod(c[4]);
      x.position_decay = std::stod(c[5]);
      x.prompt_tokens = std::stoull(c[6]);
      x.ttft_ms = std::stod(c[7]);
      x.served_fraction = std::stod(c[8]);
      x.top1_agreement = std::stod(c[9]);
      x.mean_kl = std::stod(c[10]);
      x.greedy_match = std::stoull(c[11]);
    } catch (const std::exception&) {
      return Status::InvalidArgument(path + ":" + std::to_string(n) + ": a field is not a number");
    }
    (c[0] == "mean" ? r->means : r->rows).push_back(x);
  }
  if (r->means.empty()) return Status::InvalidArgument(path + ": no mean rows");
  return Status::OK();
}

// The options checked, and one BlendSettings per (selection, position decay), then the oracle's.
Status blend_settings(const EvalBlendOptions& o, std::vector<BlendSettings>* settings) {
  if (o.store.empty()) return Status::InvalidArgument("--store is required (documents precomputed with --chunks)");
  if (o.documents.empty()) return Status::InvalidArgument("--documents: no document files");
  for (double r : o.ratios)
    if (!(r >= 0 && r <= 1)) return Status::InvalidArgument("--ratios: each must be in [0, 1]");
  if (o.position_decays.empty()) return Status::InvalidArgument("--position-decays: none given");
  if (o.selections.empty()) return Status::InvalidArgument("--selections: none given");
  if (o.check_layer < -1) return Status::InvalidArgument("--check-layer must be >= 0");
  if (o.prompts.size() != 1 && o.prompts.size() != o.sizes.size())
    return Status::InvalidArgument("--prompts: one number, or one per size (" + std::to_string(o.sizes.size()) +
                                   " sizes, " + std::to_string(o.prompts.size()) + " numbers)");
  for (const auto& name : o.selections)
    for (double decay : o.position_decays) {
      BlendSettings bs;
      UCM_RETURN_IF_ERROR(parse_selection(name, "--selections", &bs.selection));
      bs.check_layer = o.check_layer < 0 ? default_check_layer(bs.selection) : uint32_t(o.check_layer);
      bs.position_decay = decay;
      bs.relevance_exponent = o.relevance_exponent;
      UCM_RETURN_IF_ERROR(check_blend_settings(bs, std::numeric_limits<int64_t>::max()));
      settings->push_back(bs);
    }
  if (o.oracle) {
    BlendSettings bs;
    bs.selection = BlendSelection::kDeviation;
    bs.check_layer = o.check_layer < 0 ? 1 : uint32_t(o.check_layer);
    bs.position_decay = 0;
    settings->push_back(bs);  // .oracle is set per prompt
  }
  return Status::OK();
}

// What every prompt's measurements share.
struct BlendEval {
  const EvalBlendOptions& o;
  const Engine& eng;
  const StoreClient& store;
  const ucm_rope_params& rope;
  const std::vector<BlendSettings>& settings;
  EvalBlendResult* out;
};

// One blend run of prompt bp at one ratio; its row.
Status blend_row(const BlendEval& e, const BlendPrompt& bp, BlendBaselines& base, size_t si, double ratio,
                 int64_t capacity, EvalBlendResult::Row row) {
  BlendSettings bs = e.settings[si];
  if (e.o.oracle && si + 1 == e.settings.size()) bs.oracle = &base.recompute_cache;
  BlendOutcome b;
  bs.ratio = ratio;
  UCM_RETURN_IF_ERROR(measure_blend(e.eng, e.store, e.rope, bp, base.ref, bs, capacity, &b));
  row.method = bs.oracle ? "oracle" : std::string("blend-") + selection_name(bs.selection);
  row.ratio = ratio;
  row.position_decay = bs.position_decay;
  row.ttft_ms = b.ttft_ms;
  row.served_fraction = b.served_fraction;
  row.top1_agreement = b.vs_ref.top1_agreement;
  row.mean_kl = b.vs_ref.mean_kl;
  row.greedy_match = b.greedy_match;
  row.chunk_blocks_failed = b.stats.blocks_failed;
  row.stored_tokens = b.stats.stored_tokens;
  row.recomputed_tokens = b.stats.recomputed_tokens;
  row.check_layer = bs.check_layer;
  row.relevance_ms = b.stats.relevance_ms;
  e.out->rows.push_back(row);
  if (e.o.progress)
    spdlog::info("eval blend: {} docs, ratio {:.2f}, {}: top-1 {:.3f}, KL {:.4f}, TTFT {:.0f} ms "
                 "(prefix {:.0f}, recompute {:.0f})",
                 row.size, ratio,
                 bs.oracle ? std::string("oracle")
                           : fmt::format("{}, position decay {}", selection_name(bs.selection), bs.position_decay),
                 b.vs_ref.top1_agreement, b.vs_ref.mean_kl, b.ttft_ms, base.ttft_prefix_ms, base.ttft_recompute_ms);
  return Status::OK();
}

// Prompt j of k documents: full recompute and prefix caching as baselines, then every setting at
// every ratio.
Status eval_prompt(const BlendEval& e, const tok::Tokenizer& tk, uint32_t k, uint32_t j, uint32_t n_prompts,
                   const Session& s) {
  const size_t M = e.o.documents.size();
  std::vector<std::string> names;
  for (uint32_t i = 0; i < k; ++i) names.push_back(e.o.documents[(size_t(j) * k + i) % M]);
  BlendPrompt bp;
  UCM_RETURN_IF_ERROR(make_blend_prompt(tk, e.store, names, e.o.question, &bp));
  const int64_t capacity = int64_t(bp.ids.size()) + e.o.new_tokens;
  if (Status st = s.check_capacity(bp.ids.size(), e.o.new_tokens, "a prompt of " + std::to_string(k) + " documents");
      !st.ok())
    return Status::InvalidArgument(st.message() + ": use shorter documents");
  if (e.o.progress) spdlog::info("eval blend: {} documents, prompt {}/{} ({} tokens)", k, j + 1, n_prompts, bp.ids.size());
  BlendBaselines base;
  UCM_RETURN_IF_ERROR(measure_baselines(e.eng, bp, capacity, e.o.new_tokens, &base));
  EvalBlendResult::Row row;
  row.size = k;
  row.prompt = j;
  row.prompt_tokens = bp.ids.size();
  row.method = "recompute";
  row.ttft_ms = base.ttft_recompute_ms;
  row.top1_agreement = 1;
  row.greedy_match = base.ref.tokens.size();
  e.out->rows.push_back(row);
  row.method = "prefix";
  row.ttft_ms = base.ttft_prefix_ms;
  row.served_fraction = base.prefix_served_fraction;
  row.top1_agreement = base.prefix.top1_agreement;
  row.mean_kl = base.prefix.mean_kl;
  e.out->rows.push_back(row);
  for (size_t si = 0; si < e.settings.size(); ++si)
    for (double ratio : e.o.ratios) UCM_RETURN_IF_ERROR(blend_row(e, bp, base, si, ratio, capacity, row));
  return Status::OK();
}

// Means per (size, method, ratio, position decay), in first-seen order.
void mean_rows(EvalBlendResult* out) {
  using Key = std::tuple<uint32_t, std::string, double, double>;
  std::vector<Key> keys;
  std::map<Key, std::vector<const EvalBlendResult::Row*>> groups;
  for (const auto& x : out->rows) {
    auto key = std::make_tuple(x.size, x.method, x.ratio, x.position_decay);
    if (!groups.count(key)) keys.push_back(key);
    groups[key].push_back(&x);
  }
  for (const auto& key : keys) {
    const auto& g = groups[key];
    EvalBlendResult::Row m;
    m.size = std::get<0>(key);
    m.method = std::get<1>(key);
    m.ratio = std::get<2>(key);
    m.position_decay = std::get<3>(key);
    m.prompt = uint32_t(g.size());
    double tok = 0, gm = 0;
    for (const auto* x : g) {
      tok += double(x->prompt_tokens);
      m.ttft_ms += x->ttft_ms;
      m.served_fraction += x->served_fraction;
      m.top1_agreement += x->top1_agreement;
      m.mean_kl += x->mean_kl;
      gm += double(x->greedy_match);
    }
    const double n = double(g.size());
    m.prompt_tokens = uint64_t(tok / n);
    m.ttft_ms /= n;
    m.served_fraction /= n;
    m.top1_agreement /= n;
    m.mean_kl /= n;
    m.greedy_match = uint64_t(gm / n + 0.5);
    out->means.push_back(m);
  }
}

}  // namespace

Status eval_blend(const EvalBlendOptions& o, EvalBlendResult* out) {
  *out = EvalBlendResult{};
  if (!o.from_csv.empty()) {  // redraw only
    UCM_RETURN_IF_ERROR(read_csv(o.from_csv, out));
    if (!o.png.empty()) UCM_RETURN_IF_ERROR(draw_png(o.png, *out));
    return Status::OK();
  }
  std::vector<BlendSettings> settings;
  UCM_RETURN_IF_ERROR(blend_settings(o, &settings));
  Session s;
  SessionOptions so = session_options(o);
  so.precompute_config = o.precompute_config;
  UCM_RETURN_IF_ERROR(s.load(so));
  for (const auto& bs : settings) UCM_RETURN_IF_ERROR(check_blend_settings(bs, s.model().config().num_hidden_layers));
  UCM_RETURN_IF_ERROR(s.open_store());
  const StoreClient& store = *s.store();
  ucm_rope_params rope;
  UCM_RETURN_IF_ERROR(blend_rope(store, s.model(), &rope));
  const Engine eng = s.engine();
  const size_t M = o.documents.size();
  const BlendEval e{o, eng, store, rope, settings, out};
  for (size_t si = 0; si < o.sizes.size(); ++si) {
    const uint32_t k = o.sizes[si], n_prompts = o.prompts.size() == 1 ? o.prompts[0] : o.prompts[si];
    if (k == 0 || k > M) return Status::InvalidArgument("--sizes: " + std::to_string(k) + " documents per prompt, " +
                                                        std::to_string(M) + " documents given");
    for (uint32_t j = 0; j < n_prompts; ++j) UCM_RETURN_IF_ERROR(eval_prompt(e, s.tokenizer(), k, j, n_prompts, s));
  }
  mean_rows(out);
  if (!o.csv.empty()) UCM_RETURN_IF_ERROR(write_csv(o.csv, *out));
  if (!o.png.empty()) UCM_RETURN_IF_ERROR(draw_png(o.png, *out));
  return Status::OK();
}

std::string EvalBlendResult::to_json() const {
  // per_prompt: a blend row of one prompt also says what its prefill did (the means do not).
  auto rows_json = [](const std::vector<Row>& v, bool per_prompt) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const auto& x : v) {
      nlohmann::ordered_json r = {{"size", x.size}, {"prompt", x.prompt}, {"method", x.method}, {"ratio", x.ratio},
                                  {"position_decay", x.position_decay}, {"prompt_tokens", x.prompt_tokens},
                                  {"ttft_ms", x.ttft_ms}, {"served_fraction", x.served_fraction},
                                  {"top1_agreement", x.top1_agreement}, {"mean_kl", x.mean_kl},
                                  {"greedy_match", x.greedy_match}};
      if (per_prompt && x.method != "recompute" && x.method != "prefix") {
        r["stored_tokens"] = x.stored_tokens;
        r["recomputed_tokens"] = x.recomputed_tokens;
        r["check_layer"] = x.check_layer;
        r["relevance_ms"] = x.relevance_ms;
        r["chunk_blocks_failed"] = x.chunk_blocks_failed;
      }
      a.push_back(std::move(r));
    }
    return a;
  };
  nlohmann::ordered_json j = {{"means", rows_json(means, false)}, {"rows", rows_json(rows, true)}};
  return j.dump(2);
}

std::string EvalBlendResult::to_text() const {
  std::ostringstream s;
  char buf[256];
  s << "docs  method           ratio  decay  prompt_tokens  TTFT_ms  served  top1_agreement  mean_KL  greedy_match  "
       "prompts\n";
  for (const auto& x : means) {
    std::snprintf(buf, sizeof buf, "%4u  %-15s  %5.2f  %5g  %13llu  %7.0f  %6.3f  %14.3f  %7.4f  %12llu  %7u\n", x.size,
                  x.method.c_str(), x.ratio, x.position_decay, (unsigned long long)x.prompt_tokens, x.ttft_ms, x.served_fraction,
                  x.top1_agreement, x.mean_kl, (unsigned long long)x.greedy_match, x.prompt);
    s << buf;
  }
  return s.str();
}

}  // namespace ucm::generate
