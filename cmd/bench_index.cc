// cmd/bench_index.cc: `ucm bench index` parses arguments and calls ucm::bench::run_index_bench.
#include "bench_index_cmd.h"

#include <unistd.h>

#include <climits>
#include <memory>

#include "ucm/bench/index_bench.h"
#include "cli_common.h"

namespace ucm::cli {

namespace {

void add_index_options(CLI::App* c, bench::IndexBenchOptions* o) {
  c->add_option("--store", o->dir,
                "With --keep: the store to create (missing or empty). Without: parent of a temporary "
                "store ucm-bench-index-<pid>, removed at the end (default $TMPDIR or .)");
  c->add_flag("--keep", o->keep, "Keep the store");
  c->add_option("--blocks", o->blocks, "Blocks in the index")->capture_default_str()->check(CLI::Range(2ull, 1ull << 34));
  c->add_option("--block-bytes", o->block_bytes, "Apparent payload bytes per block (sparse)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--replay", o->replay, "Journal entries behind the table for the replay open")->capture_default_str();
  c->add_option("--lookup-seconds", o->lookup_seconds, "Duration of the lookup loop")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--gc-fraction", o->gc_fraction, "Share of the bytes gc evicts (0 skips gc)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  c->add_option("--gc-arg", o->gc_args, "Extra argument for the gc child run (repeatable)");
  c->add_option("--seed", o->seed, "Seed of tokens and access times")->capture_default_str();
}

// The inspect and gc child runs run this ucm.
Status run_with_this_ucm(const bench::IndexBenchOptions& o, bench::IndexBenchReport* rep) {
  bench::IndexBenchOptions with = o;
  char exe[PATH_MAX] = {0};
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) with.ucm_exe.assign(exe, size_t(n));
  return bench::run_index_bench(with, rep);
}

}  // namespace

void setup_bench_index(CLI::App& bench) {
  add_bench_command(bench, "index", run_with_this_ucm, add_index_options,
                    "Costs that grow with the number of blocks, without payloads: reader open (with and without "
                    "the fingerprint table), lookups per second on one core, inspect and gc time and peak memory, "
                    "on a store whose index is written directly over sparse data files");
}

}  // namespace ucm::cli
