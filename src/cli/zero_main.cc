// The `zero` binary: one program, many subcommands (docs/design.md §2).
#include <cstdio>
#include <cstring>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/remote_agent.h"

int main(int argc, char** argv) {
  // mpirun's remote agent on a multi-host launch (cli/remote_agent.h): not a user command.
  if (argc >= 2 && std::strcmp(argv[1], "_launch_agent") == 0) {
    return zero::cli::run_launch_agent(argc, argv);
  }
  CLI::App app{
      "ZeRO.cpp: DeepSpeed's ZeRO, native. Trains GPT-2 and Llama-family models with ZeRO stages "
      "0-3, driven by ds_config.json.",
      "zero"};
  app.require_subcommand(0, 1);
  app.fallthrough(false);
  bool show_version = false;
  app.add_flag("--version", show_version, "print the version and the backends built in");

  int exit_code = 0;
  zero::cli::add_train_command(app, exit_code);
  zero::cli::add_launch_command(app, exit_code);
  zero::cli::add_config_command(app, exit_code);
  zero::cli::add_estimate_command(app, exit_code);
  zero::cli::add_ckpt_command(app, exit_code);
  zero::cli::add_generate_command(app, exit_code);
  zero::cli::add_eval_command(app, exit_code);
  zero::cli::add_bench_command(app, exit_code);
  zero::cli::add_data_command(app, exit_code);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError& e) {
    // Unknown flags: name each with the closest known flag of the subcommand.
    std::fputs(zero::cli::describe_unknown_flags(app, e).c_str(), stderr);
    return 2;
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (show_version) {
    std::fputs(zero::cli::version_text().c_str(), stdout);
    return 0;
  }
  if (app.get_subcommands().empty()) {
    // `zero` alone is a usage error (as git and docker treat it): the help, on stderr.
    std::fputs(app.help().c_str(), stderr);
    return 2;
  }
  return exit_code;
}
