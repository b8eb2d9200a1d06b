// `zero config check FILE [--world_size N] [--strict]` and `zero config show FILE`: load a
// ds_config the way DeepSpeed does, validate it strictly, print problems or the effective config.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "config/effective.h"
#include "config/loader.h"
#include "config/validate.h"

namespace zero::cli {
namespace {

struct ConfigArgs {
  std::string file;
  int64_t world_size = 0;  // 0: not given
  bool strict = false;
};

void add_common_options(CLI::App* cmd, ConfigArgs& args) {
  cmd->add_option("FILE", args.file, "ds_config.json (or url-safe base64 of its JSON text)")
      ->required();
  cmd->add_option("--world_size,--world-size", args.world_size,
                  "data-parallel world size: checks the batch triad (train_batch_size = micro x "
                  "accumulation x world_size)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--strict", args.strict, "treat warnings as errors");
}

// Loads and validates; prints diagnostics to stderr. Returns the loaded config when it is valid.
std::optional<config::LoadedConfig> load_and_check(const ConfigArgs& args, int& exit_code) {
  auto loaded = config::load_ds_config_file(args.file);
  if (!loaded.ok()) {
    std::fprintf(stderr, "error: %s\n", loaded.status().message().c_str());
    exit_code = 2;
    return std::nullopt;
  }
  config::ValidateOptions options;
  if (args.world_size > 0) options.world_size = args.world_size;
  options.strict = args.strict;
  config::ValidationReport report =
      config::validate_ds_config(loaded->json, options, &loaded->sources);
  std::fputs(report.format().c_str(), stderr);
  if (!report.ok()) {
    std::fprintf(stderr, "%s: invalid DeepSpeed config (%d error%s, %d warning%s)\n",
                 args.file.c_str(), report.error_count(), report.error_count() == 1 ? "" : "s",
                 report.warning_count(), report.warning_count() == 1 ? "" : "s");
    exit_code = 2;
    return std::nullopt;
  }
  exit_code = 0;
  return std::move(loaded).value();
}

}  // namespace

void add_config_command(CLI::App& app, int& exit_code) {
  CLI::App* config =
      app.add_subcommand("config", "validate (check) or print (show) a ds_config.json");
  config->require_subcommand(1);

  auto check_args = std::make_shared<ConfigArgs>();
  CLI::App* check = config->add_subcommand(
      "check",
      "validate a DeepSpeed config strictly; exit 0 when valid (warnings allowed), 2 when not");
  add_common_options(check, *check_args);
  check->callback([check_args, &exit_code] {
    auto loaded = load_and_check(*check_args, exit_code);
    if (loaded) std::printf("%s: ok\n", check_args->file.c_str());
  });

  auto show_args = std::make_shared<ConfigArgs>();
  CLI::App* show = config->add_subcommand(
      "show",
      "print the effective config: every default filled in, each value marked "
      "// file, default, auto or derived");
  add_common_options(show, *show_args);
  show->callback([show_args, &exit_code] {
    auto loaded = load_and_check(*show_args, exit_code);
    if (!loaded) return;
    std::optional<int64_t> world;
    if (show_args->world_size > 0) world = show_args->world_size;
    auto effective = config::build_effective_config(loaded->json, world);
    if (!effective.ok()) {
      std::fprintf(stderr, "error: %s\n", effective.status().message().c_str());
      exit_code = 2;
      return;
    }
    std::fputs(config::render_effective_config(*effective).c_str(), stdout);
  });
}

}  // namespace zero::cli
