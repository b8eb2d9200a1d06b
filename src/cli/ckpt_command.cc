// `zero ckpt`: placeholder until its issue lands.
#include "cli/commands.h"

namespace zero::cli {

void add_ckpt_command(CLI::App& app, int& exit_code) {
  add_unimplemented_command(app, exit_code, "ckpt",
                            "inspect, verify and consolidate checkpoints (to-fp32, info, verify)",
                            "planned: checkpoints");
}

}  // namespace zero::cli
