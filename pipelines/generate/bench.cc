// pipelines/generate/bench.cc: `ucm bench generate` (see ucm/generate/generate.h).
//
// One real document (default: the Python docs' library/functions.rst.txt), already precomputed
// into the store with precompute's defaults (cmd/bench_generate.cc does that). For each prefix
// length P, the prompt is the first P tokens of the templated document, and TTFT with the cache
// (hash, lookup, load of the P - T cached tokens, prefill of the last block) is measured against
// full recompute of all P tokens, alternating the two, in one run.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "engine.h"
#include "generate_internal.h"
#include "session.h"
#include "ucm/generate/generate.h"

namespace ucm::generate {

using namespace detail;

Status bench_generate(const BenchGenerateOptions& o, std::vector<BenchGeneratePoint>* out) {
  out->clear();
  if (o.store.empty()) return Status::InvalidArgument("bench generate needs --store (a scratch directory)");
  if (o.prefix_tokens.empty()) return Status::InvalidArgument("no prefix lengths");
  Session s;
  // Precompute's default fingerprint: what cmd/bench_generate.cc stored with.
  const SessionOptions so = session_options(o);
  UCM_RETURN_IF_ERROR(s.load(so));
  const uint32_t longest = *std::max_element(o.prefix_tokens.begin(), o.prefix_tokens.end());
  UCM_RETURN_IF_ERROR(s.check_capacity(longest, 0, "prefix"));
  std::string text;
  {
    std::ifstream f(o.corpus_file, std::ios::binary);
    if (!f) return Status::InvalidArgument("cannot read " + o.corpus_file);
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
  }
  std::vector<int32_t> ids;
  try {
    ids = prompt_ids(s.tokenizer(), o.template_file, text);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("document: ") + e.what());
  }
  if (ids.size() < longest)
    return Status::InvalidArgument(o.corpus_file + " has " + std::to_string(ids.size()) + " tokens; " +
                                   std::to_string(longest) + " needed");
  UCM_RETURN_IF_ERROR(s.open_store());
  const Engine eng = s.engine();

  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (uint32_t P : o.prefix_tokens) {
    std::vector<int32_t> prompt(ids.begin(), ids.begin() + P);
    std::vector<double> cached, full, load;
    BenchGeneratePoint pt;
    pt.prefix_tokens = P;
    pt.prompt_tokens = P;
    pt.tokens_match = true;
    for (uint32_t r = 0; r < std::max<uint32_t>(1, o.repeats); ++r) {
      Prefill a, b;
      UCM_RETURN_IF_ERROR(eng.prefill_cached(prompt, P, &a));
      UCM_RETURN_IF_ERROR(eng.prefill_recompute(prompt, P, &b));
      cached.push_back(a.ttft_ms);
      load.push_back(a.load_ms);
      full.push_back(b.ttft_ms);
      pt.hit_tokens = uint32_t(a.used_blocks * s.block_size());
      pt.tokens_match = pt.tokens_match && a.logits.argmax().item<int64_t>() == b.logits.argmax().item<int64_t>();
    }
    pt.ttft_cached_ms = median(cached);
    pt.ttft_recompute_ms = median(full);
    pt.load_ms = median(load);
    pt.speedup = pt.ttft_recompute_ms / pt.ttft_cached_ms;
    spdlog::info("bench generate: {} tokens: TTFT {:.1f} ms cached ({} hit), {:.1f} ms recompute: {:.1f}x", P,
                 pt.ttft_cached_ms, pt.hit_tokens, pt.ttft_recompute_ms, pt.speedup);
    out->push_back(pt);
  }
  return Status::OK();
}

}  // namespace ucm::generate
