// cmd/bench_index.cc: `ucm bench index` parses arguments and calls ucm::bench::run_index_bench.
#include "bench_index_cmd.h"

#include <unistd.h>

#include <climits>
#include <memory>

#include "ucm/bench/index_bench.h"
#include "cli_common.h"

namespace ucm::cli {

void setup_bench_index(CLI::App& bench) {
  struct Args {
    bench::IndexBenchOptions o;
    CommonFlags common;
    bool fail_on_miss = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = bench.add_subcommand(
      "index",
      "Costs that grow with the number of blocks, without payloads: reader open (with and without "
      "the fingerprint table), lookups per second on one core, inspect and gc time and peak memory, "
      "on a store whose index is written directly over sparse data files");
  c->add_option("--store", a->o.dir,
                "With --keep: the store to create (missing or empty). Without: parent of a temporary "
                "store ucm-bench-index-<pid>, removed at the end (default $TMPDIR or .)");
  c->add_flag("--keep", a->o.keep, "Keep the store");
  c->add_option("--blocks", a->o.blocks, "Blocks in the index")->capture_default_str()->check(CLI::Range(2ull, 1ull << 34));
  c->add_option("--block-bytes", a->o.block_bytes, "Apparent payload bytes per block (sparse)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--replay", a->o.replay, "Journal entries behind the table for the replay open")->capture_default_str();
  c->add_option("--lookup-seconds", a->o.lookup_seconds, "Duration of the lookup loop")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--gc-fraction", a->o.gc_fraction, "Share of the bytes gc evicts (0 skips gc)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  c->add_option("--gc-arg", a->o.gc_args, "Extra argument for the gc child run (repeatable)");
  c->add_option("--seed", a->o.seed, "Seed of tokens and access times")->capture_default_str();
  c->add_flag("--fail-on-miss", a->fail_on_miss, "Exit 1 when a target is missed");
  add_common_flags(c, &a->common);
  c->callback([a] {
    a->o.progress = make_progress("bench index", a->common);
    char exe[PATH_MAX] = {0};
    const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) a->o.ucm_exe.assign(exe, size_t(n));
    bench::IndexBenchReport rep;
    Status s = bench::run_index_bench(a->o, &rep);
    finish("bench index", a->common, s, rep, s.ok());
    if (a->fail_on_miss && !rep.all_pass()) throw CLI::RuntimeError(admin::kExitError);
  });
}

}  // namespace ucm::cli
