// cmd/audit.h: `ucm inspect --audit` in ucm-torch (pipelines/audit): the runner that main()
// registers with set_audit_runner (cmd/inspect.h).
#pragma once
#include "inspect.h"

namespace ucm::cli {

void run_audit_command(const InspectCmdOptions& opt);

}  // namespace ucm::cli
