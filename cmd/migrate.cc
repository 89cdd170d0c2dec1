// cmd/migrate.cc: `ucm migrate` parses arguments and calls ucm::admin::migrate.
#include "migrate_cmd.h"

#include <memory>

namespace ucm::cli {

CLI::App* setup_migrate(CLI::App& app) {
  auto opt = std::make_shared<MigrateCmdOptions>();
  CLI::App* sub = app.add_subcommand(
      "migrate", "Copy / merge blocks, namespaces and documents from SRC into DST (created if "
                 "missing), optionally converting the payload dtype; or --upgrade a store's format");
  sub->add_option("SRC", opt->src, "Source store (opened read-only)")->required();
  sub->add_option("DST", opt->dst, "Destination store (created if missing; takes its writer lock)");
  sub->add_option("--namespace", opt->ns, "Only this namespace (name or 32-hex id)");
  sub->add_option("--dtype", opt->dtype,
                  "Convert payloads to this dtype into a new namespace (block hashes are kept)")
      ->check(CLI::IsMember({"bf16", "fp16"}));
  sub->add_flag("--upgrade", opt->upgrade, "Rewrite SRC in place to the current format version");
  sub->add_flag("--to-sharded", opt->to_sharded,
                "Turn the single-writer store SRC into a sharded store in place (store_v1.md §11.4); "
                "its blocks become one shard, nothing is copied");
  sub->add_option("--shard-name", opt->shard_name, "--to-sharded: the shard's name (default: the host name)");
  add_common_flags(sub, &opt->common);
  sub->callback([opt] { run_migrate(*opt); });
  return sub;
}

void run_migrate(const MigrateCmdOptions& opt) {
  admin::MigrateReport rep;
  if (!opt.upgrade && !opt.to_sharded && opt.dst.empty())
    throw CLI::ValidationError("DST", "is required unless --upgrade or --to-sharded is given");
  if ((opt.upgrade || opt.to_sharded) && !opt.dst.empty())
    throw CLI::ValidationError(opt.upgrade ? "--upgrade" : "--to-sharded", "takes one store; DST must not be given");
  if (!opt.shard_name.empty() && !opt.to_sharded)
    throw CLI::ValidationError("--shard-name", "goes with --to-sharded");
  admin::MigrateOptions o;
  o.ns = opt.ns;
  o.dtype = opt.dtype;
  o.upgrade = opt.upgrade;
  o.to_sharded = opt.to_sharded;
  o.shard_name = opt.shard_name;
  o.progress = make_progress("migrate", opt.common);
  Status st = admin::migrate(opt.src, opt.dst, o, &rep);
  finish("migrate", opt.common, st, rep, st.ok());
}

}  // namespace ucm::cli
