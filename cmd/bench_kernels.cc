// cmd/bench_kernels.cc: `ucm bench kernels` parses arguments and calls
// ucm::kernels::bench::run_kernels_bench (kernels/bench), or says that this build has no CUDA.
#include "bench_kernels_cmd.h"

#include <memory>

#include "cli_common.h"
#if UCM_CLI_HAVE_KERNELS_BENCH
#include "kernels_bench.h"
#endif

namespace ucm::cli {

namespace {

#if UCM_CLI_HAVE_KERNELS_BENCH
using KernelsOptions = kernels::bench::KernelsBenchOptions;
using KernelsReport = kernels::bench::KernelsBenchReport;
#else
struct KernelsOptions {
  int device = 0;
  uint32_t layers = 32, kv_heads = 8, head_dim = 128, block_size = 16, blocks = 64, tp = 4, sets = 256,
           repr_blocks = 256, group = 4, iters = 20;
};
struct KernelsReport {
  std::string to_json() const { return "{}"; }
  std::string to_text() const { return ""; }
  bool all_pass() const { return false; }
};
#endif

void add_kernels_options(CLI::App* c, KernelsOptions* o) {
  c->add_option("--device", o->device, "CUDA device ordinal")->capture_default_str();
  c->add_option("--blocks", o->blocks, "Blocks per load")->capture_default_str()->check(CLI::Range(1u, 1u << 16));
  c->add_option("--layers", o->layers, "Layers of the KV shape")->capture_default_str()->check(CLI::Range(1u, 1024u));
  c->add_option("--kv-heads", o->kv_heads, "KV heads")->capture_default_str()->check(CLI::Range(1u, 1024u));
  c->add_option("--head-dim", o->head_dim, "Head dim")->capture_default_str()->check(CLI::Range(2u, 512u));
  c->add_option("--tp", o->tp, "TP degree of the head-range case")->capture_default_str()->check(CLI::Range(1u, 64u));
  c->add_option("--sets", o->sets, "Scoring: (layer, KV head) sets")->capture_default_str()->check(CLI::Range(1u, 1u << 20));
  c->add_option("--repr-blocks", o->repr_blocks, "Scoring: blocks per set")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  c->add_option("--iters", o->iters, "Timed repetitions (median)")->capture_default_str()->check(CLI::Range(1u, 10000u));
}

Status run_kernels(const KernelsOptions& o, KernelsReport* rep) {
#if UCM_CLI_HAVE_KERNELS_BENCH
  return kernels::bench::run_kernels_bench(o, rep);
#else
  (void)o, (void)rep;
  return Status::NotSupported("this ucm was built without CUDA (kernels/ builds where nvcc is found, -DUCM_CUDA=ON)");
#endif
}

}  // namespace

void setup_bench_kernels(CLI::App& bench) {
  add_bench_command(bench, "kernels", run_kernels, add_kernels_options,
                    "The CUDA kernels against the copies they must keep up with, in one run on one GPU: the paged "
                    "scatter of a load against cudaMemcpy host-to-device of the same bytes (whole blocks, a TP head "
                    "range, small pages), scores + top-k against a device-to-device copy of the representations");
}

}  // namespace ucm::cli
