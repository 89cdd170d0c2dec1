// cmd/build.cc: `ucm build` parses arguments and calls ucm::admin::build.
#include "build_cmd.h"

#include <memory>

namespace ucm::cli {

CLI::App* setup_build(CLI::App& app) {
  auto opt = std::make_shared<BuildCmdOptions>();
  CLI::App* sub = app.add_subcommand(
      "build",
      "Create a store (or, with --rebuild-index, rebuild its index from the data files)");
  sub->add_option("STORE", opt->store, "Store directory (missing or empty: created)")->required();
  sub->add_option("--config", opt->config, "YAML store settings (configs/store.yaml)")
      ->check(CLI::ExistingFile);
  sub->add_flag("--rebuild-index", opt->rebuild_index,
                "Move index/ aside (to tmp/index.broken-<ms>) and rebuild it from data/ alone");
  sub->add_flag("--sharded", opt->sharded,
                "Create a sharded store (store_v1.md §11): one writer shard per machine on a shared "
                "file system, readers see them all");
  add_common_flags(sub, &opt->common);
  sub->callback([opt] { run_build(*opt); });
  return sub;
}

void run_build(const BuildCmdOptions& opt) {
  admin::BuildOptions o;
  o.config_path = opt.config;
  o.rebuild_index = opt.rebuild_index;
  o.sharded = opt.sharded;
  o.progress = make_progress("build", opt.common);
  admin::BuildReport rep;
  Status st = admin::build(opt.store, o, &rep);
  finish("build", opt.common, st, rep, st.ok());
}

}  // namespace ucm::cli
