// `zero launch` logic: DeepSpeed's launcher options (hostfile, --include/--exclude, --num_nodes,
// --num_gpus, .deepspeed_env) turned into one mpirun or srun argv. build_launch_plan is pure: every
// fact about the machine comes in through LaunchEnvironment, so tests can describe any machine.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace zero::cli {

// One host and the slot ids (GPU indices, or CPU rank slots) selected on it.
struct HostSlots {
  std::string host;
  std::vector<int> slots;

  bool operator==(const HostSlots&) const = default;
};
// Hosts in hostfile order; ranks are numbered host by host in this order.
using ResourcePool = std::vector<HostSlots>;

// A text file already read: its path (for messages) and content.
struct TextFile {
  std::string path;
  std::string text;
};

enum class LauncherKind { kOpenMpi, kSlurm };

// What the user asked for: `zero launch` flags; -1 / empty means "not given".
struct LaunchOptions {
  int num_gpus = -1;
  int num_nodes = -1;
  std::string hostfile_path = "/job/hostfile";  // DeepSpeed's default
  bool hostfile_given = false;                  // given explicitly: a missing file is an error
  std::string include;
  std::string exclude;
  std::string master_addr;
  int master_port = 29500;
  LauncherKind launcher = LauncherKind::kOpenMpi;
  std::string launcher_args;  // split shell-like, appended verbatim before the command
  // --enable_each_rank_log DIR (DeepSpeed's flag): each rank's stdout and stderr go to
  // DIR/<start timestamp>_rank<N>.log instead of the launcher's output. Empty or "None": off.
  std::string each_rank_log_dir;
  std::vector<std::string> command;  // what each rank runs
  // Several hosts: run `AGENT HOST true` on each before starting (DeepSpeed's ssh check).
  bool host_check = true;
  // After a job's first failure, how long mpirun may take to end before it is stopped.
  double abort_grace_s = 10;
};

// Facts about the launching machine, gathered by gather_launch_environment().
struct LaunchEnvironment {
  bool is_root = false;
  int local_cores = 1;
  int local_gpus = 0;  // 0: CPU-only machine, ranks are CPU ranks
  std::string cwd;
  std::string home;
  std::string hostname;
  std::string self_exe;                       // absolute path of the running `zero` binary
  std::map<std::string, std::string> vars;    // the process environment
  std::optional<TextFile> hostfile;           // the hostfile's content, when the file exists
  std::vector<TextFile> deepspeed_env_files;  // ~/.deepspeed_env then ./.deepspeed_env, if present
  std::string start_timestamp;                // local time %Y%m%d%H%M%S (per-rank log names)
};

// The result: the argv to execute plus what it was derived from (for messages and tests).
struct LaunchPlan {
  std::vector<std::string> argv;  // argv[0] is "mpirun" or "srun" (looked up in PATH)
  ResourcePool resources;         // empty for slurm without a hostfile (slurm decides)
  int world_size = 0;
  std::string master_addr;
  std::map<std::string, std::string> exports;  // NAME=VALUE set for every rank by the launcher
  std::vector<std::string> forwarded_vars;     // names passed with their current value (-x NAME)
  // --enable_each_rank_log: the per-rank file names, "DIR/<timestamp>_rank<N>.log" (absolute).
  std::string rank_log_pattern;
  // "node1=0-3,node2=4-7": the ranks each host runs (for messages naming a failed host or rank).
  std::string host_ranks;
  // Open MPI runs with other hosts than this one: the hosts, and the remote agent (ssh unless the
  // launcher args or OMPI_MCA_plm_rsh_agent name another) that mpirun's wrapper,
  // `zero _launch_agent`, runs for each (remote_agent.h).
  std::vector<std::string> remote_hosts;
  std::vector<std::string> remote_agent;
};

// The absolute per-rank log directory of --enable_each_rank_log, or "" when it is off.
std::string each_rank_log_dir(const LaunchOptions& options, const LaunchEnvironment& env);

// Parses an MPI-style hostfile: `hostname slots=N` per line, `#` comments, blank lines. Errors name
// `path:line` for a bad line or a duplicate host. Each host gets slots 0..N-1.
StatusOr<ResourcePool> parse_hostfile(std::string_view text, const std::string& path);

// DeepSpeed's resource filter: `NODE_SPEC[@NODE_SPEC...]` with `NODE_SPEC = host[:slot[,slot...]]`.
// include keeps only what is named (a bare host keeps all its slots); exclude removes it (a bare
// host removes the host). Mutually exclusive. Hosts left without slots are dropped; the pool's
// host order is kept and each host's slots come out sorted and unique.
StatusOr<ResourcePool> filter_resources(const ResourcePool& pool, std::string_view include,
                                        std::string_view exclude);

// --num_nodes keeps the first N hosts; --num_gpus keeps the first N slots of each host (an error
// when a host has fewer). -1 means no limit.
StatusOr<ResourcePool> limit_resources(const ResourcePool& pool, int num_nodes, int num_gpus);

// Parses `.deepspeed_env` lines `NAME=VALUE` (blank lines and `#` comments skipped) into `out`;
// later files override earlier ones. Errors name `path:line`.
Status parse_deepspeed_env(const TextFile& file, std::map<std::string, std::string>& out);

// Splits a string the way a POSIX shell splits words: whitespace, '...', "...", backslash escapes.
StatusOr<std::vector<std::string>> split_shell_words(std::string_view text);

// Quotes one word for a POSIX shell when it needs it (for printing the command line).
std::string shell_quote(std::string_view word);
std::string shell_join(const std::vector<std::string>& argv);

// The whole decision: which hosts and slots, which launcher argv, which exports.
StatusOr<LaunchPlan> build_launch_plan(const LaunchOptions& options, const LaunchEnvironment& env);

// Reads the real machine: geteuid, cores, GPUs (/proc/driver/nvidia/gpus or /dev/nvidiaN, narrowed
// by CUDA_VISIBLE_DEVICES), cwd, $HOME, hostname, /proc/self/exe, environ, the hostfile named by
// `hostfile_path` and the .deepspeed_env files ($DS_ENV_FILE overrides the name).
StatusOr<LaunchEnvironment> gather_launch_environment(const std::string& hostfile_path);

}  // namespace zero::cli
