// `zero train`: placeholder until its issue lands.
#include "cli/commands.h"

namespace zero::cli {

void add_train_command(CLI::App& app, int& exit_code) {
  add_unimplemented_command(app, exit_code, "train", "train or fine-tune a model with ZeRO",
                            "planned: training core");
}

}  // namespace zero::cli
