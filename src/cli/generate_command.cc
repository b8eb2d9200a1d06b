// `zero generate`: placeholder until its issue lands.
#include "cli/commands.h"

namespace zero::cli {

void add_generate_command(CLI::App& app, int& exit_code) {
  add_unimplemented_command(app, exit_code, "generate", "generate text from a trained model",
                            "planned: training core / ZeRO-Inference");
}

}  // namespace zero::cli
