// cmd/migrate.cc: `ucm migrate` parses arguments and calls ucm::admin::migrate.
#include "migrate.h"

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
  add_common_flags(sub, &opt->common);
  sub->callback([opt] { run_migrate(*opt); });
  return sub;
}

void run_migrate(const MigrateCmdOptions& opt) {
  admin::MigrateReport rep;
  if (!opt.upgrade && opt.dst.empty())
    throw CLI::ValidationError("DST", "is required unless --upgrade is given");
  if (opt.upgrade && !opt.dst.empty())
    throw CLI::ValidationError("--upgrade", "takes one store; DST must not be given");
  admin::MigrateOptions o;
  o.ns = opt.ns;
  o.dtype = opt.dtype;
  o.upgrade = opt.upgrade;
  o.progress = make_progress("migrate", opt.common);
  Status st = admin::migrate(opt.src, opt.dst, o, &rep);
  finish("migrate", opt.common, st, rep, st.ok());
}

}  // namespace ucm::cli
