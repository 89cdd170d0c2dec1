// cmd/migrate.cc: `ucm migrate` parses arguments and calls ucm::admin::migrate.
#include "migrate_cmd.h"

#include <memory>

namespace ucm::cli {

namespace {

void add_migrate_options(CLI::App* sub, MigrateCmdOptions* opt) {
  sub->add_option("SRC", opt->src, "Source store (opened read-only)")->required();
  sub->add_option("DST", opt->dst, "Destination store (created if missing; takes its writer lock)");
  sub->add_option("--namespace", opt->o.ns, "Only this namespace (name or 32-hex id)");
  sub->add_option("--dtype", opt->o.dtype,
                  "Convert payloads to this dtype into a new namespace (block hashes are kept)")
      ->check(CLI::IsMember({"bf16", "fp16"}));
  sub->add_flag("--upgrade", opt->o.upgrade, "Rewrite SRC in place to the current format version");
  sub->add_flag("--to-sharded", opt->o.to_sharded,
                "Turn the single-writer store SRC into a sharded store in place (store_v1.md §11.4); "
                "its blocks become one shard, nothing is copied");
  sub->add_option("--shard-name", opt->o.shard_name, "--to-sharded: the shard's name (default: the host name)");
}

}  // namespace

void run_migrate(const MigrateCmdOptions& opt) {
  admin::MigrateOptions o = opt.o;
  if (!o.upgrade && !o.to_sharded && opt.dst.empty())
    throw CLI::ValidationError("DST", "is required unless --upgrade or --to-sharded is given");
  if ((o.upgrade || o.to_sharded) && !opt.dst.empty())
    throw CLI::ValidationError(o.upgrade ? "--upgrade" : "--to-sharded", "takes one store; DST must not be given");
  if (!o.shard_name.empty() && !o.to_sharded)
    throw CLI::ValidationError("--shard-name", "goes with --to-sharded");
  o.progress = make_progress("migrate", opt.common);
  admin::MigrateReport rep;
  Status st = admin::migrate(opt.src, opt.dst, o, &rep);
  finish("migrate", opt.common, st, rep, st.ok());
}

CLI::App* setup_migrate(CLI::App& app) {
  return add_command(app, "migrate", run_migrate, add_migrate_options,
                     "Copy / merge blocks, namespaces and documents from SRC into DST (created if missing), "
                     "optionally converting the payload dtype; or --upgrade a store's format");
}

}  // namespace ucm::cli
