// cmd/bench.cc: `ucm bench store` and `ucm bench retrieval` parse arguments and call
// ucm::bench::run_store_bench / run_retrieval_bench (lib/bench).
#include "bench_cmd.h"
#include "torch_commands.h"

#include <memory>

#include "ucm/bench/retrieval_bench.h"
#include "ucm/bench/store_bench.h"
#include "bench_index_cmd.h"
#include "bench_kernels_cmd.h"
#include "cli_common.h"
#if UCM_CLI_HAVE_BENCH_PRECOMPUTE
#include "bench_precompute_cmd.h"
#endif
#if UCM_CLI_HAVE_GENERATE
#include "bench_generate_cmd.h"
#endif

namespace ucm::cli {

CLI::App* setup_bench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Measure ucm on this machine (docs/benchmarks.md)");
  bench->require_subcommand(1);
  setup_bench_store(*bench);
  setup_bench_index(*bench);
  setup_bench_retrieval(*bench);
  setup_bench_kernels(*bench);
#if UCM_CLI_HAVE_BENCH_PRECOMPUTE
  setup_bench_precompute(*bench);
#endif
#if UCM_CLI_HAVE_GENERATE
  setup_bench_generate(*bench);
#else
  add_torch_placeholders(*bench, "bench");  // run by ucm-torch, or not built
#endif
  return bench;
}

namespace {

void add_store_options(CLI::App* c, bench::StoreBenchOptions* o) {
  c->add_option("--store", o->dir,
                "With --keep: the store to bench into (created if missing). Without: parent of a "
                "temporary store ucm-bench-<pid>, removed at the end (default $TMPDIR or .)");
  c->add_flag("--keep", o->keep,
              "Keep the store and its blocks (namespaces \"bench\" and \"bench-lookup\")");
  c->add_option("--blocks", o->blocks, "Blocks dumped and loaded (and raw I/Os per pass)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--block-bytes", o->block_bytes,
                "Payload bytes per block, a multiple of 4096 (default: SmolLM2-135M bf16 block)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--queue-depth", o->queue_depth, "Raw passes: I/Os in flight")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  c->add_option("--deep-queue-depth", o->deep_queue_depth,
                "Also: raw O_DIRECT random reads at this queue depth, and a load with this many I/O threads "
                "(0 skips both)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  c->add_option("--buffered-threads", o->buffered_threads,
                "Also: raw buffered random reads from this many threads on a dropped page cache, and a "
                "buffered load (direct_io off) with this many I/O threads (0 skips both)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  c->add_option("--io-threads", o->io_threads,
                "Store I/O threads (OpenOptions::io_threads); 0 = the queue depth")
      ->capture_default_str();
  c->add_option("--device", o->device,
                "Also load every block into a paged KV cache on this CUDA device (ucm_store_load_ex), cold, "
                "against the host load (-1: no)")
      ->capture_default_str()
      ->expected(0, 1)
      ->default_str("0");
  c->add_option("--batch", o->batch, "Blocks per dump / load task")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  c->add_option("--inflight", o->inflight, "Dump / load tasks in flight")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  c->add_option("--lookup-blocks", o->lookup_blocks,
                "Blocks in the lookup index (0 skips the lookup benchmark)")
      ->capture_default_str();
  c->add_option("--lookup-batch", o->lookup_batch, "Hashes per lookup call (a chain prefix)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  c->add_option("--lookup-seconds", o->lookup_seconds, "Duration of the lookup loop")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--seed", o->seed, "Seed of tokens and orders (0 = random)")->capture_default_str();
}

void add_retrieval_options(CLI::App* c, bench::RetrievalBenchOptions* o) {
  c->add_option("--contexts", o->contexts, "Context lengths in blocks (default 512 8192: 8K and 128K tokens)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--layers", o->layers, "Layers (L)")->capture_default_str()->check(CLI::Range(1, 1024));
  c->add_option("--kv-heads", o->kv_heads, "KV heads (H)")->capture_default_str()->check(CLI::Range(1, 1024));
  c->add_option("--q-heads", o->q_heads, "Query heads (a multiple of --kv-heads)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  c->add_option("--head-dim", o->head_dim, "Head dim (D)")->capture_default_str()->check(CLI::Range(1, 1024));
  c->add_option("--block-size", o->block_size, "Tokens per block (T)")->capture_default_str()->check(CLI::Range(1, 4096));
  c->add_option("--hash-bits", o->hash_bits, "R4 bits per token (B, a multiple of 8)")
      ->capture_default_str()
      ->check(CLI::Range(8, 4096));
  c->add_option("--seconds", o->min_seconds, "Minimum time of each measurement")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--memcpy-mib", o->memcpy_bytes, "Bytes of the memcpy reference")
      ->transform([](std::string v) { return std::to_string(std::stoull(v) << 20); })
      ->check(CLI::PositiveNumber);
  c->add_option("--seed", o->seed, "Seed of the synthetic data")->capture_default_str();
}

}  // namespace

void setup_bench_store(CLI::App& bench) {
  add_bench_command(bench, "store", bench::run_store_bench, add_store_options,
                    "Dump / load throughput and lookups per second of the store, against the disk's raw "
                    "O_DIRECT rate measured in the same run (same directory, block size, queue depth)");
}

void setup_bench_retrieval(CLI::App& bench) {
  add_bench_command(bench, "retrieval", bench::run_retrieval_bench, add_retrieval_options,
                    "Block-sparse retrieval per layer per decode step (ESA, QUEST, GSA, PSA) over synthetic "
                    "representations of the default model's shape, against memcpy measured in the same run");
}

}  // namespace ucm::cli
