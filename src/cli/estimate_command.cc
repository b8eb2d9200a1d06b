// `zero estimate`: placeholder until its issue lands.
#include "cli/commands.h"

namespace zero::cli {

void add_estimate_command(CLI::App& app, int& exit_code) {
  add_unimplemented_command(app, exit_code, "estimate", "ZeRO model-states memory estimator",
                            "planned: foundation");
}

}  // namespace zero::cli
