// cmd/audit_cmd.h: `ucm inspect --audit` in ucm-torch (pipelines/audit): the runner that main()
// registers with set_audit_runner (cmd/inspect_cmd.h).
#pragma once
#include "inspect_cmd.h"

namespace ucm::cli {

void run_audit_command(const InspectCmdOptions& opt);

}  // namespace ucm::cli
