// pipelines/generate/eval_blend.cc: `ucm eval blend` (see ucm/generate/eval.h, docs/blend.md).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "blend.h"
#include "internal.h"
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
                  x.method.c_str(), x.ratio, x.position_decay, (unsigned long long)x.prompt_tokens, x.ttft_ms, x.served_fraction,
                  x.top1_agreement, x.mean_kl, (unsigned long long)x.greedy_match);
    f << buf;
  };
  for (const auto& x : r.rows) row("prompt", x);
  for (const auto& x : r.means) row("mean", x);
  return f ? Status::OK() : Status::IOError("writing " + path);
}

// Quality (top-1 agreement, KL) and TTFT against the recompute ratio, one line per prompt size;
// prefix caching as a horizontal reference on the TTFT panel.
Status draw_png(const std::string& path, const EvalBlendResult& r) {
  FILE* g = ::popen("gnuplot 2>&1", "w");
  if (!g) return Status::IOError("cannot run gnuplot (apt-get install gnuplot-nox)");
  std::ostringstream s;
  std::map<uint32_t, std::vector<const EvalBlendResult::Row*>> by_size;
  std::vector<double> decays;
  for (const auto& x : r.means) {
    by_size[x.size].push_back(&x);
    if (x.method == "blend" && std::find(decays.begin(), decays.end(), x.position_decay) == decays.end())
      decays.push_back(x.position_decay);
  }
  auto blend_title = [&](uint32_t size, double decay) {
    std::string t = std::to_string(size) + " docs blend";
    if (decays.size() > 1) t += decay > 0 ? " (prior " + std::to_string(int(decay)) + ")" : " (no prior)";
    return t;
  };
  s << "set terminal pngcairo size 1200,500 noenhanced\nset output '" << path << "'\n"
    << "set multiplot layout 1,3 title 'CacheBlend on SmolLM2-135M, python3.11-doc (against full recompute)'\n"
    << "set grid\nset xlabel 'recompute ratio'\nset key bottom right\n";
  auto panel = [&](const std::string& title, const std::string& ylabel, auto value, bool with_prefix) {
    s << "set title '" << title << "'\nset ylabel '" << ylabel << "'\nplot ";
    bool first = true;
    for (const auto& [size, rows] : by_size) {
      for (double d : decays) {
        s << (first ? "" : ", ") << "'-' using 1:2 with linespoints lw 2 title '" << blend_title(size, d) << "'";
        first = false;
      }
      if (with_prefix) s << ", '-' using 1:2 with lines dt 2 title '" << size << " docs prefix caching'";
    }
    s << "\n";
    for (const auto& [size, rows] : by_size) {
      for (double d : decays) {
        for (const auto* x : rows)
          if (x->method == "blend" && x->position_decay == d) s << x->ratio << " " << value(*x) << "\n";
        s << "e\n";
      }
      if (with_prefix) {
        for (const auto* x : rows)
          if (x->method == "prefix") s << "0 " << value(*x) << "\n1 " << value(*x) << "\n";
        s << "e\n";
      }
    }
  };
  panel("teacher-forced top-1 agreement", "agreement", [](const EvalBlendResult::Row& x) { return x.top1_agreement; }, false);
  panel("mean KL of next-token distributions", "KL (nats)", [](const EvalBlendResult::Row& x) { return x.mean_kl; }, false);
  panel("TTFT", "ms", [](const EvalBlendResult::Row& x) { return x.ttft_ms; }, true);
  s << "unset multiplot\n";
  const std::string script = s.str();
  std::fwrite(script.data(), 1, script.size(), g);
  const int rc = ::pclose(g);
  if (rc != 0) return Status::IOError("gnuplot failed drawing " + path + " (exit " + std::to_string(rc) + ")");
  return Status::OK();
}

}  // namespace

Status eval_blend(const EvalBlendOptions& o, EvalBlendResult* out) {
  *out = EvalBlendResult{};
  if (o.store.empty()) return Status::InvalidArgument("--store is required (documents precomputed with --chunks)");
  if (o.documents.empty()) return Status::InvalidArgument("--documents: no document files");
  for (double r : o.ratios)
    if (!(r >= 0 && r <= 1)) return Status::InvalidArgument("--ratios: each must be in [0, 1]");
  if (o.position_decays.empty()) return Status::InvalidArgument("--position-decays: none given");
  for (double d : o.position_decays)
    if (!(d >= 0) || std::isinf(d))
      return Status::InvalidArgument("--position-decays: each must be a finite number >= 0 (0: no prior)");
  Inputs in;
  UCM_RETURN_IF_ERROR(load_inputs(o.model_dir, o.tokenizer_file, &in));
  std::string desc_json;
  precompute::PrecomputeOptions po;
  UCM_RETURN_IF_ERROR(fingerprint(*in.model, o.precompute_config, &desc_json, &po));
  StoreClient store;
  UCM_RETURN_IF_ERROR(store.open(o.store, false));
  UCM_RETURN_IF_ERROR(store.resolve_namespace("", desc_json, false));
  if (!store.found()) return Status::NotFound("the store holds no namespace for this model");
  ucm_rope_params rope;
  UCM_RETURN_IF_ERROR(blend_rope(store, *in.model, &rope));
  Engine eng(*in.model, &store, po.block_size, torch_dtype_of(po.dtype));
  const auto& mc = in.model->config();
  const size_t M = o.documents.size();
  if (o.prompts.size() != 1 && o.prompts.size() != o.sizes.size())
    return Status::InvalidArgument("--prompts: one number, or one per size (" + std::to_string(o.sizes.size()) +
                                   " sizes, " + std::to_string(o.prompts.size()) + " numbers)");
  for (size_t si = 0; si < o.sizes.size(); ++si) {
    const uint32_t k = o.sizes[si], n_prompts = o.prompts.size() == 1 ? o.prompts[0] : o.prompts[si];
    if (k == 0 || k > M) return Status::InvalidArgument("--sizes: " + std::to_string(k) + " documents per prompt, " +
                                                        std::to_string(M) + " documents given");
    for (uint32_t j = 0; j < n_prompts; ++j) {
      std::vector<std::string> names;
      for (uint32_t i = 0; i < k; ++i) names.push_back(o.documents[(size_t(j) * k + i) % M]);
      BlendPrompt bp;
      UCM_RETURN_IF_ERROR(make_blend_prompt(*in.tokenizer, store, names, o.question, &bp));
      const int64_t capacity = int64_t(bp.ids.size()) + o.new_tokens;
      if (capacity > mc.max_position_embeddings)
        return Status::InvalidArgument("a prompt of " + std::to_string(k) + " documents has " +
                                       std::to_string(bp.ids.size()) + " tokens: too long for the model; use shorter documents");
      if (o.progress)
        spdlog::info("eval blend: {} documents, prompt {}/{} ({} tokens)", k, j + 1, n_prompts, bp.ids.size());
      BlendBaselines base;
      UCM_RETURN_IF_ERROR(measure_baselines(eng, bp, capacity, o.new_tokens, &base));
      EvalBlendResult::Row row;
      row.size = k;
      row.prompt = j;
      row.prompt_tokens = bp.ids.size();
      row.method = "recompute";
      row.ttft_ms = base.ttft_recompute_ms;
      row.top1_agreement = 1;
      row.greedy_match = base.ref.tokens.size();
      out->rows.push_back(row);
      row.method = "prefix";
      row.ttft_ms = base.ttft_prefix_ms;
      row.served_fraction = base.prefix_served_fraction;
      row.top1_agreement = base.prefix.top1_agreement;
      row.mean_kl = base.prefix.mean_kl;
      out->rows.push_back(row);
      std::vector<double> decays = o.position_decays;
      if (o.oracle) decays.push_back(-1);  // the oracle's rows
      for (double decay : decays)
      for (double ratio : o.ratios) {
        BlendOutcome b;
        BlendSettings bs;
        bs.ratio = ratio;
        bs.check_layer = o.check_layer;
        bs.position_decay = decay < 0 ? 0 : decay;
        if (decay < 0) bs.oracle = &base.recompute_cache;
        UCM_RETURN_IF_ERROR(measure_blend(eng, store, rope, bp, base.ref, bs, capacity, &b));
        row.method = decay < 0 ? "oracle" : "blend";
        row.ratio = ratio;
        row.position_decay = bs.position_decay;
        row.ttft_ms = b.ttft_ms;
        row.served_fraction = b.served_fraction;
        row.top1_agreement = b.vs_ref.top1_agreement;
        row.mean_kl = b.vs_ref.mean_kl;
        row.greedy_match = b.greedy_match;
        row.chunk_blocks_failed = b.stats.blocks_failed;
        out->rows.push_back(row);
        if (o.progress)
          spdlog::info("eval blend: {} docs, ratio {:.2f}, {}: top-1 {:.3f}, KL {:.4f}, TTFT {:.0f} ms "
                       "(prefix {:.0f}, recompute {:.0f})",
                       k, ratio, decay < 0 ? std::string("oracle") : "position decay " + std::to_string(int(decay)), b.vs_ref.top1_agreement, b.vs_ref.mean_kl, b.ttft_ms, base.ttft_prefix_ms,
                       base.ttft_recompute_ms);
      }
    }
  }
  // Means per (size, method, ratio, position decay), in first-seen order.
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
  if (!o.csv.empty()) UCM_RETURN_IF_ERROR(write_csv(o.csv, *out));
  if (!o.png.empty()) UCM_RETURN_IF_ERROR(draw_png(o.png, *out));
  return Status::OK();
}

std::string EvalBlendResult::to_json() const {
  auto rows_json = [](const std::vector<Row>& v) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const auto& x : v)
      a.push_back({{"size", x.size}, {"prompt", x.prompt}, {"method", x.method}, {"ratio", x.ratio},
                   {"position_decay", x.position_decay}, {"prompt_tokens", x.prompt_tokens}, {"ttft_ms", x.ttft_ms}, {"served_fraction", x.served_fraction},
                   {"top1_agreement", x.top1_agreement}, {"mean_kl", x.mean_kl}, {"greedy_match", x.greedy_match}});
    return a;
  };
  nlohmann::ordered_json j = {{"means", rows_json(means)}, {"rows", rows_json(rows)}};
  return j.dump(2);
}

std::string EvalBlendResult::to_text() const {
  std::ostringstream s;
  char buf[256];
  s << "docs  method     ratio  decay  prompt_tokens  TTFT_ms  served  top1_agreement  mean_KL  greedy_match  "
       "prompts\n";
  for (const auto& x : means) {
    std::snprintf(buf, sizeof buf, "%4u  %-9s  %5.2f  %5g  %13llu  %7.0f  %6.3f  %14.3f  %7.4f  %12llu  %7u\n", x.size,
                  x.method.c_str(), x.ratio, x.position_decay, (unsigned long long)x.prompt_tokens, x.ttft_ms, x.served_fraction,
                  x.top1_agreement, x.mean_kl, (unsigned long long)x.greedy_match, x.prompt);
    s << buf;
  }
  return s.str();
}

}  // namespace ucm::generate
