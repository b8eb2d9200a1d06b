// The `zero` subcommands. Each add_*_command registers one subcommand on the app; its callback
// stores the process exit status in `exit_code` (0 ok, 2 invalid input, 1 runtime failure).
#pragma once

#include <CLI/CLI.hpp>

namespace zero::cli {

void add_config_command(CLI::App& app, int& exit_code);
void add_estimate_command(CLI::App& app, int& exit_code);
void add_train_command(CLI::App& app, int& exit_code);
void add_launch_command(CLI::App& app, int& exit_code);
void add_ckpt_command(CLI::App& app, int& exit_code);
void add_generate_command(CLI::App& app, int& exit_code);
void add_bench_command(CLI::App& app, int& exit_code);
void add_data_command(CLI::App& app, int& exit_code);
void add_eval_command(CLI::App& app, int& exit_code);

// Registers a subcommand that exists in the interface but is not built yet: it says so and exits 2.
CLI::App* add_unimplemented_command(CLI::App& app, int& exit_code, const std::string& name,
                                    const std::string& description, const std::string& planned);

// `zero --version` text: "zero X.Y.Z" then "cuda: ...", "nccl: ...", "mpi: ..." lines.
std::string version_text();

}  // namespace zero::cli
