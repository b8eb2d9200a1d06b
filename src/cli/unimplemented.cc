// Subcommands that are part of the interface but not built yet say so plainly instead of
// pretending.
#include <cstdio>

#include "cli/commands.h"

namespace zero::cli {

CLI::App* add_unimplemented_command(CLI::App& app, int& exit_code, const std::string& name,
                                    const std::string& description, const std::string& planned) {
  CLI::App* sub = app.add_subcommand(name, description + " [not implemented yet]");
  sub->allow_extras();
  sub->callback([&exit_code, name, planned] {
    std::fprintf(stderr, "error: `zero %s` is not implemented yet in this version (%s)\n",
                 name.c_str(), planned.c_str());
    exit_code = 2;
  });
  return sub;
}

}  // namespace zero::cli
