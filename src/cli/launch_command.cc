// `zero launch [options] -- COMMAND...`: DeepSpeed's launcher options turned into an mpirun (or
// srun) command line, printed and then run; the logic lives in cli/launcher.h.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

#include "cli/commands.h"
#include "cli/job_watch.h"
#include "cli/launcher.h"
#include "cli/remote_agent.h"

namespace zero::cli {
namespace {

// How long every host gets to answer `AGENT HOST true` (ssh's ConnectTimeout too).
constexpr int kHostCheckTimeoutS = 15;

struct LaunchArgs {
  LaunchOptions options;
  std::string launcher = "openmpi";
  bool dry_run = false;
};

void run_launch(LaunchArgs& args, CLI::App* cmd, int& exit_code) {
  LaunchOptions& options = args.options;
  options.launcher = args.launcher == "slurm" ? LauncherKind::kSlurm : LauncherKind::kOpenMpi;
  options.hostfile_given = cmd->count("--hostfile") > 0;
  auto env = gather_launch_environment(options.hostfile_path);
  if (!env.ok()) {
    std::fprintf(stderr, "zero launch: error: %s\n", env.status().message().c_str());
    exit_code = 2;
    return;
  }
  auto plan = build_launch_plan(options, *env);
  if (!plan.ok()) {
    std::fprintf(stderr, "zero launch: error: %s\n", plan.status().message().c_str());
    exit_code = 2;
    return;
  }
  // A dry run's output is the command itself; a real run keeps stdout for the ranks.
  std::FILE* out = args.dry_run ? stdout : stderr;
  std::fprintf(out, "zero launch: %s\n", shell_join(plan->argv).c_str());
  if (!plan->rank_log_pattern.empty()) {
    std::fprintf(out, "zero launch: each rank's stdout and stderr go to %s\n",
                 plan->rank_log_pattern.c_str());
  }
  std::fflush(out);
  if (args.dry_run) {
    exit_code = 0;
    return;
  }
  // The per-rank log directory exists before any rank starts (ranks on other hosts make theirs).
  const std::string log_dir = each_rank_log_dir(options, *env);
  if (!log_dir.empty()) {
    std::error_code ec;
    if (std::filesystem::exists(log_dir, ec) && !std::filesystem::is_directory(log_dir, ec)) {
      std::fprintf(stderr, "zero launch: error: --enable_each_rank_log %s: not a directory\n",
                   log_dir.c_str());
      exit_code = 2;
      return;
    }
    std::filesystem::create_directories(log_dir, ec);
    if (ec) {
      std::fprintf(stderr, "zero launch: error: --enable_each_rank_log %s: cannot create: %s\n",
                   log_dir.c_str(), ec.message().c_str());
      exit_code = 2;
      return;
    }
  }
  // Ranks inherit it (mpirun's local ranks, srun --export=ALL): their stdout is ours, forwarded,
  // so `zero train` prints whole lines, never a live progress line.
  setenv("ZERO_LAUNCHED", "1", 1);
  if (!plan->remote_hosts.empty()) {
    if (options.host_check) {
      Status reachable = check_hosts_reachable(plan->remote_agent, plan->remote_hosts,
                                               plan->host_ranks, kHostCheckTimeoutS);
      if (!reachable.ok()) {
        std::fprintf(stderr, "zero launch: error: %s\n", reachable.message().c_str());
        exit_code = 1;
        return;
      }
    }
    // For mpirun's agent wrapper (`zero _launch_agent`), which runs in mpirun's environment.
    setenv("ZERO_LAUNCH_AGENT", shell_join(plan->remote_agent).c_str(), 1);
    setenv("ZERO_LAUNCH_HOST_RANKS", plan->host_ranks.c_str(), 1);
  }
  auto status = run_and_watch(
      plan->argv, {.host_ranks = plan->host_ranks, .abort_grace_s = options.abort_grace_s});
  if (!status.ok()) {
    std::fprintf(stderr, "zero launch: error: %s\n", status.status().message().c_str());
    exit_code = 1;
    return;
  }
  exit_code = *status;
}

}  // namespace

void add_launch_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<LaunchArgs>();
  LaunchOptions& o = args->options;
  CLI::App* cmd =
      app.add_subcommand("launch",
                         "start ranks through mpirun / srun with DeepSpeed's launcher options: "
                         "zero launch [options] -- zero train ...");
  cmd->add_option("--num_gpus,--num-gpus,--num_accelerators", o.num_gpus,
                  "ranks per host: the first N slots of each host (default: all GPUs; on a "
                  "machine without GPUs, N CPU ranks, default 1)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--num_nodes,--num-nodes", o.num_nodes, "use the first N hosts of the hostfile")
      ->check(CLI::PositiveNumber);
  cmd->add_option("-H,--hostfile", o.hostfile_path,
                  "MPI-style hostfile, lines 'hostname slots=N' (default /job/hostfile; when "
                  "absent, this machine only)");
  cmd->add_option("-i,--include", o.include,
                  "resources to use: host[:slot,slot]@host..., e.g. worker-0@worker-1:0,2");
  cmd->add_option("-e,--exclude", o.exclude, "resources to leave out, same syntax as --include");
  cmd->add_option("--master_addr,--master-addr", o.master_addr,
                  "MASTER_ADDR for the ranks (default 127.0.0.1 on one host, else the first host)");
  cmd->add_option("--master_port,--master-port", o.master_port, "MASTER_PORT for the ranks")
      ->default_val(29500);
  cmd->add_option("--launcher", args->launcher, "openmpi (mpirun) or slurm (srun)")
      ->check(CLI::IsMember({"openmpi", "slurm"}));
  cmd->add_option("--launcher_args,--launcher-args", o.launcher_args,
                  "extra arguments for mpirun/srun, split like a shell would");
  cmd->add_option("--enable_each_rank_log,--enable-each-rank-log", o.each_rank_log_dir,
                  "DIR: each rank's stdout and stderr go to DIR/<timestamp>_rank<N>.log "
                  "(DeepSpeed's naming) instead of this terminal");
  cmd->add_flag("--dry_run,--dry-run", args->dry_run, "print the command, do not run it");
  cmd->add_flag("!--no_ssh_check,!--no-ssh-check", o.host_check,
                "several hosts: do not check first that each answers the remote agent (ssh)");
  cmd->add_option("--abort_grace", o.abort_grace_s,
                  "seconds mpirun may take to end after the job's first failure before it is "
                  "stopped (Open MPI waits forever for a host it cannot reach)")
      ->default_val(10)
      ->check(CLI::Range(1.0, 3600.0));
  cmd->add_option("command", o.command,
                  "what each rank runs (after --); a leading 'zero' is "
                  "replaced by this binary's path");
  cmd->callback([args, cmd, &exit_code] { run_launch(*args, cmd, exit_code); });
}

}  // namespace zero::cli
