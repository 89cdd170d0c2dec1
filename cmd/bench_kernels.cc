// cmd/bench_kernels.cc: `ucm bench kernels` parses arguments and calls
// ucm::kernels::bench::run_kernels_bench (kernels/bench), or says that this build has no CUDA.
#include "bench_kernels_cmd.h"

#include <memory>

#include "cli_common.h"
#if UCM_CLI_HAVE_KERNELS_BENCH
#include "kernels_bench.h"
#endif

namespace ucm::cli {

void setup_bench_kernels(CLI::App& bench) {
#if UCM_CLI_HAVE_KERNELS_BENCH
  using Options = kernels::bench::KernelsBenchOptions;
  using Report = kernels::bench::KernelsBenchReport;
#else
  struct Options {
    int device = 0;
    uint32_t layers = 32, kv_heads = 8, head_dim = 128, block_size = 16, blocks = 64, tp = 4, sets = 256,
             repr_blocks = 256, group = 4, iters = 20;
  };
  struct Report {
    std::string to_json() const { return "{}"; }
    std::string to_text() const { return ""; }
    bool all_pass() const { return false; }
  };
#endif
  struct Args {
    Options o;
    CommonFlags common;
    bool fail_on_miss = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = bench.add_subcommand(
      "kernels",
      "The CUDA kernels against the copies they must keep up with, in one run on one GPU: the paged "
      "scatter of a load against cudaMemcpy host-to-device of the same bytes (whole blocks, a TP head "
      "range, small pages), scores + top-k against a device-to-device copy of the representations");
  c->add_option("--device", a->o.device, "CUDA device ordinal")->capture_default_str();
  c->add_option("--blocks", a->o.blocks, "Blocks per load")->capture_default_str()->check(CLI::Range(1u, 1u << 16));
  c->add_option("--layers", a->o.layers, "Layers of the KV shape")->capture_default_str()->check(CLI::Range(1u, 1024u));
  c->add_option("--kv-heads", a->o.kv_heads, "KV heads")->capture_default_str()->check(CLI::Range(1u, 1024u));
  c->add_option("--head-dim", a->o.head_dim, "Head dim")->capture_default_str()->check(CLI::Range(2u, 512u));
  c->add_option("--tp", a->o.tp, "TP degree of the head-range case")->capture_default_str()->check(CLI::Range(1u, 64u));
  c->add_option("--sets", a->o.sets, "Scoring: (layer, KV head) sets")->capture_default_str()->check(CLI::Range(1u, 1u << 20));
  c->add_option("--repr-blocks", a->o.repr_blocks, "Scoring: blocks per set")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  c->add_option("--iters", a->o.iters, "Timed repetitions (median)")->capture_default_str()->check(CLI::Range(1u, 10000u));
  c->add_flag("--fail-on-miss", a->fail_on_miss, "Exit 1 when a target is missed");
  add_common_flags(c, &a->common);
  c->callback([a] {
    Report rep;
#if UCM_CLI_HAVE_KERNELS_BENCH
    Status s = kernels::bench::run_kernels_bench(a->o, &rep);
#else
    Status s = Status::NotSupported("this ucm was built without CUDA (kernels/ builds where nvcc is found, -DUCM_CUDA=ON)");
#endif
    finish("bench kernels", a->common, s, rep, s.ok());
    if (a->fail_on_miss && !rep.all_pass()) throw CLI::RuntimeError(admin::kExitError);
  });
}

}  // namespace ucm::cli
