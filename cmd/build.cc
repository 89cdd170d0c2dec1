// cmd/build.cc: `ucm build` parses arguments and calls ucm::admin::build.
#include "build_cmd.h"

#include <memory>

namespace ucm::cli {

namespace {

void add_build_options(CLI::App* sub, BuildCmdOptions* opt) {
  sub->add_option("STORE", opt->store, "Store directory (missing or empty: created)")->required();
  sub->add_option("--config", opt->o.config_path, "YAML store settings (configs/store.yaml)")
      ->check(CLI::ExistingFile);
  sub->add_flag("--rebuild-index", opt->o.rebuild_index,
                "Move index/ aside (to tmp/index.broken-<ms>) and rebuild it from data/ alone");
  sub->add_flag("--sharded", opt->o.sharded,
                "Create a sharded store (store_v1.md §11): one writer shard per machine on a shared "
                "file system, readers see them all");
}

}  // namespace

void run_build(const BuildCmdOptions& opt) {
  admin::BuildOptions o = opt.o;
  o.progress = make_progress("build", opt.common);
  admin::BuildReport rep;
  Status st = admin::build(opt.store, o, &rep);
  finish("build", opt.common, st, rep, st.ok());
}

CLI::App* setup_build(CLI::App& app) {
  return add_command(app, "build", run_build, add_build_options,
                     "Create a store (or, with --rebuild-index, rebuild its index from the data files)");
}

}  // namespace ucm::cli
