// cmd/inspect.cc: `ucm inspect` parses arguments and calls ucm::admin::inspect.
#include "inspect.h"

#include <memory>

namespace ucm::cli {

CLI::App* setup_inspect(CLI::App& app) {
  auto opt = std::make_shared<InspectCmdOptions>();
  CLI::App* sub = app.add_subcommand(
      "inspect", "Show a store: format, namespaces, blocks, files, ages (read-only; safe while a "
                 "writer runs)");
  sub->add_option("STORE", opt->store, "Store directory")->required();
  sub->add_flag("--verify", opt->verify,
                "Read every block (KV and representations) and check checksums and header "
                "fields; exit 3 when any is corrupt");
  sub->add_option("--threads", opt->threads,
                  "--verify: reader threads (blocks read in chunks sorted by file and offset)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  sub->add_option("--block", opt->block, "Show one block's index record (32 hex digits)");
  sub->add_option("--namespace", opt->ns, "Restrict to one namespace (name or 32-hex id)");
  sub->add_flag("--docs", opt->docs, "List the document registry");
  add_common_flags(sub, &opt->common);
  sub->callback([opt] { run_inspect(*opt); });
  return sub;
}

void run_inspect(const InspectCmdOptions& opt) {
  admin::InspectOptions o;
  o.verify = opt.verify;
  o.block_hex = opt.block;
  o.ns = opt.ns;
  o.docs = opt.docs;
  o.threads = opt.threads;
  o.progress = make_progress("inspect", opt.common);
  admin::InspectReport rep;
  Status st = admin::inspect(opt.store, o, &rep);
  // A verify that found corrupt blocks still prints the full report (listing them).
  finish("inspect", opt.common, st, rep, st.ok() || (rep.verified_run && rep.corrupt_total > 0));
}

}  // namespace ucm::cli
