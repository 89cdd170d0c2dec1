// cmd/audit.cc: see audit.h.
#include "audit_cmd.h"

#include "ucm/audit/audit.h"

namespace ucm::cli {

void run_audit_command(const InspectCmdOptions& opt) {
  audit::AuditOptions o;
  o.store = opt.store;
  o.model_dir = opt.model;
  o.ns = opt.o.ns;
  o.sample = opt.sample;
  o.all = opt.all;
  o.seed = opt.seed;
  o.tolerance = opt.tolerance;
  o.device = opt.device;
  o.compute_dtype = opt.compute_dtype;
  o.threads = opt.compute_threads;
  o.fix = opt.fix;
  o.progress = make_progress("inspect --audit", opt.common);
  audit::AuditReport rep;
  const Status st = audit::run_audit(o, &rep);
  // Poisoned blocks (Corruption, exit 3) still print the report that lists them.
  finish("inspect", opt.common, st, rep, st.ok() || (st.code() == Code::kCorruption && rep.audited > 0));
}

}  // namespace ucm::cli
