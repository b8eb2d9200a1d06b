// `zero config`: placeholder until its issue lands.
#include "cli/commands.h"

namespace zero::cli {

void add_config_command(CLI::App& app, int& exit_code) {
  add_unimplemented_command(app, exit_code, "config",
                            "validate (check) or print (show) a ds_config.json",
                            "planned: foundation");
}

}  // namespace zero::cli
