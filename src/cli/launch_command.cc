// `zero launch`: placeholder until its issue lands.
#include "cli/commands.h"

namespace zero::cli {

void add_launch_command(CLI::App& app, int& exit_code) {
  add_unimplemented_command(app, exit_code, "launch", "start ranks through mpirun / srun",
                            "planned: ZeRO stages across processes");
}

}  // namespace zero::cli
