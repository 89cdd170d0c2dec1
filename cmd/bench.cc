// cmd/bench.cc: `ucm bench store` parses arguments and calls ucm::bench::run_store_bench.
#include "bench.h"

#include <cstdio>
#include <iostream>
#include <memory>

#include "bench/store_bench.h"

namespace ucm::cli {

CLI::App* setup_bench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Measure ucm on this machine (docs/benchmarks.md)");
  bench->require_subcommand(1);
  setup_bench_store(*bench);
  return bench;
}

void setup_bench_store(CLI::App& bench) {
  struct Args {
    bench::StoreBenchOptions o;
    bool json = false;
    bool fail_on_miss = false;
    bool quiet = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = bench.add_subcommand(
      "store",
      "Dump / load throughput and lookups per second of the store, against the disk's raw "
      "O_DIRECT rate measured in the same run (same directory, block size, queue depth)");
  c->add_option("--store", a->o.dir,
                "With --keep: the store to bench into (created if missing). Without: parent of a "
                "temporary store ucm-bench-<pid>, removed at the end (default $TMPDIR or .)");
  c->add_flag("--keep", a->o.keep,
              "Keep the store and its blocks (namespaces \"bench\" and \"bench-lookup\")");
  c->add_option("--blocks", a->o.blocks, "Blocks dumped and loaded (and raw I/Os per pass)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--block-bytes", a->o.block_bytes,
                "Payload bytes per block, a multiple of 4096 (default: SmolLM2-135M bf16 block)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--queue-depth", a->o.queue_depth, "Raw passes: I/Os in flight")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  c->add_option("--io-threads", a->o.io_threads,
                "Store I/O threads (OpenOptions::io_threads); 0 = the queue depth")
      ->capture_default_str();
  c->add_option("--batch", a->o.batch, "Blocks per dump / load task")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  c->add_option("--inflight", a->o.inflight, "Dump / load tasks in flight")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  c->add_option("--lookup-blocks", a->o.lookup_blocks,
                "Blocks in the lookup index (0 skips the lookup benchmark)")
      ->capture_default_str();
  c->add_option("--lookup-batch", a->o.lookup_batch, "Hashes per lookup call (a chain prefix)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  c->add_option("--lookup-seconds", a->o.lookup_seconds, "Duration of the lookup loop")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--seed", a->o.seed, "Seed of tokens and orders (0 = random)")->capture_default_str();
  c->add_flag("--json", a->json, "Print the report as JSON on stdout");
  c->add_flag("--fail-on-miss", a->fail_on_miss, "Exit 1 when a target is missed");
  c->add_flag("-q,--quiet", a->quiet, "No progress lines on stderr");
  c->callback([a] {
    if (!a->quiet) {
      a->o.progress = [](const std::string& line) {
        std::fprintf(stderr, "bench: %s\n", line.c_str());
        std::fflush(stderr);
      };
    }
    bench::StoreBenchReport rep;
    Status s = bench::run_store_bench(a->o, &rep);
    if (!s.ok()) {
      std::fprintf(stderr, "ucm bench store: %s\n", s.ToString().c_str());
      throw CLI::RuntimeError(1);
    }
    std::cout << (a->json ? rep.to_json() + "\n" : rep.to_text()) << std::flush;
    if (a->fail_on_miss && !rep.all_pass()) throw CLI::RuntimeError(1);
  });
}

}  // namespace ucm::cli
