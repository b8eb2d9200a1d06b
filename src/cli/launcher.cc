// `zero launch` logic: hostfile / include / exclude resolution after DeepSpeed's runner.py, the
// mpirun or srun argv built from it, and the OS side (machine facts, spawn + wait).
#include "cli/launcher.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "cli/remote_agent.h"
#include "core/regular_file.h"

extern char** environ;

namespace zero::cli {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    parts.push_back(s.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) return parts;
    start = pos + 1;
  }
}

// A non-negative decimal integer, or nullopt.
std::optional<int> parse_count(std::string_view s) {
  int value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || value < 0) {
    return std::nullopt;
  }
  return value;
}

std::string join_ints(const std::vector<int>& values, const char* sep) {
  return fmt::format("{}", fmt::join(values, sep));
}

bool is_prefix_range(const std::vector<int>& slots) {
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] != static_cast<int>(i)) return false;
  }
  return true;
}

// Environment variables passed to every rank with their current value. DeepSpeed exports names
// starting with NCCL, PYTHON, MV2, UCX, MLFLOW; we add what a native binary needs to find its
// libraries and thread counts, and our own ZERO_* switches.
bool is_forwarded_var(const std::string& name) {
  static constexpr const char* kExact[] = {"PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES"};
  static constexpr const char* kPrefixes[] = {"NCCL",   "PYTHON", "MV2",  "UCX",
                                              "MLFLOW", "OMP_",   "ZERO_"};
  for (const char* exact : kExact) {
    if (name == exact) return true;
  }
  for (const char* prefix : kPrefixes) {
    if (name.starts_with(prefix)) return true;
  }
  return false;
}

struct NodeSpec {
  std::string host;
  std::vector<int> slots;  // empty: the whole host
};

StatusOr<std::vector<NodeSpec>> parse_node_specs(std::string_view spec, const char* flag) {
  std::vector<NodeSpec> nodes;
  for (std::string_view part : split(spec, '@')) {
    part = trim(part);
    NodeSpec node;
    size_t colon = part.find(':');
    node.host = std::string(trim(part.substr(0, colon)));
    if (node.host.empty()) {
      return invalid_argument("{} '{}': empty host name in '{}' (syntax: host[:slot,slot]@host)",
                              flag, spec, part);
    }
    if (colon != std::string_view::npos) {
      for (std::string_view slot_text : split(part.substr(colon + 1), ',')) {
        std::optional<int> slot = parse_count(trim(slot_text));
        if (!slot) {
          return invalid_argument("{} '{}': slot '{}' of host '{}' is not a non-negative integer",
                                  flag, spec, trim(slot_text), node.host);
        }
        node.slots.push_back(*slot);
      }
    }
    nodes.push_back(std::move(node));
  }
  return nodes;
}

const HostSlots* find_host(const ResourcePool& pool, const std::string& host) {
  for (const HostSlots& h : pool) {
    if (h.host == host) return &h;
  }
  return nullptr;
}

std::string describe_slots(const HostSlots& h) {
  return h.slots.empty() ? std::string("none") : join_ints(h.slots, ",");
}

}  // namespace

StatusOr<ResourcePool> parse_hostfile(std::string_view text, const std::string& path) {
  ResourcePool pool;
  std::map<std::string, int> line_of_host;
  int line_number = 0;
  for (std::string_view line : split(text, '\n')) {
    ++line_number;
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    // `hostname slots=N`: exactly two words.
    size_t space = line.find_first_of(" \t");
    std::string_view host = line.substr(0, space);
    std::string_view rest = space == std::string_view::npos ? "" : trim(line.substr(space));
    std::optional<int> slots;
    if (rest.starts_with("slots=")) slots = parse_count(rest.substr(6));
    if (!slots) {
      return invalid_argument("{}:{}: expected 'hostname slots=N', got '{}'", path, line_number,
                              line);
    }
    if (*slots == 0) {
      return invalid_argument("{}:{}: host '{}' has slots=0; give at least one slot", path,
                              line_number, host);
    }
    auto [it, inserted] = line_of_host.emplace(std::string(host), line_number);
    if (!inserted) {
      return invalid_argument("{}:{}: duplicate host '{}' (already listed at line {})", path,
                              line_number, host, it->second);
    }
    HostSlots entry{std::string(host), {}};
    for (int s = 0; s < *slots; ++s) entry.slots.push_back(s);
    pool.push_back(std::move(entry));
  }
  if (pool.empty()) {
    return invalid_argument("{}: hostfile lists no hosts (expected lines 'hostname slots=N')",
                            path);
  }
  return pool;
}

StatusOr<ResourcePool> filter_resources(const ResourcePool& pool, std::string_view include,
                                        std::string_view exclude) {
  if (!include.empty() && !exclude.empty()) {
    return invalid_argument("--include and --exclude are mutually exclusive");
  }
  if (include.empty() && exclude.empty()) return pool;
  const bool including = !include.empty();
  const char* flag = including ? "--include" : "--exclude";
  std::string_view spec = including ? include : exclude;
  ZERO_ASSIGN_OR_RETURN(std::vector<NodeSpec> nodes, parse_node_specs(spec, flag));

  // host -> selected slots; include starts empty, exclude starts from everything.
  std::map<std::string, std::set<int>> selected;
  if (!including) {
    for (const HostSlots& h : pool) selected[h.host].insert(h.slots.begin(), h.slots.end());
  }
  for (const NodeSpec& node : nodes) {
    const HostSlots* host = find_host(pool, node.host);
    if (host == nullptr) {
      return invalid_argument("{} '{}': host '{}' is not in the hostfile", flag, spec, node.host);
    }
    for (int slot : node.slots) {
      if (std::find(host->slots.begin(), host->slots.end(), slot) == host->slots.end()) {
        return invalid_argument("{} '{}': no slot {} on host '{}' (it has slots {})", flag, spec,
                                slot, node.host, describe_slots(*host));
      }
    }
    std::set<int>& slots = selected[node.host];
    if (including) {
      if (node.slots.empty()) {
        slots.insert(host->slots.begin(), host->slots.end());
      } else {
        slots.insert(node.slots.begin(), node.slots.end());
      }
    } else if (node.slots.empty()) {
      slots.clear();
    } else {
      for (int slot : node.slots) slots.erase(slot);
    }
  }
  ResourcePool filtered;
  for (const HostSlots& h : pool) {
    auto it = selected.find(h.host);
    if (it == selected.end() || it->second.empty()) continue;
    filtered.push_back({h.host, std::vector<int>(it->second.begin(), it->second.end())});
  }
  return filtered;
}

StatusOr<ResourcePool> limit_resources(const ResourcePool& pool, int num_nodes, int num_gpus) {
  if (num_nodes == 0 || num_nodes < -1) {
    return invalid_argument("--num_nodes {}: give a positive number", num_nodes);
  }
  if (num_gpus == 0 || num_gpus < -1) {
    return invalid_argument("--num_gpus {}: give a positive number", num_gpus);
  }
  if (num_nodes > static_cast<int>(pool.size())) {
    return invalid_argument("--num_nodes {}: only {} host{} available", num_nodes, pool.size(),
                            pool.size() == 1 ? "" : "s");
  }
  ResourcePool limited(pool.begin(), num_nodes > 0 ? pool.begin() + num_nodes : pool.end());
  if (num_gpus > 0) {
    for (HostSlots& h : limited) {
      if (num_gpus > static_cast<int>(h.slots.size())) {
        return invalid_argument("--num_gpus {}: host '{}' has only {} slot{}", num_gpus, h.host,
                                h.slots.size(), h.slots.size() == 1 ? "" : "s");
      }
      h.slots.resize(num_gpus);
    }
  }
  return limited;
}

Status parse_deepspeed_env(const TextFile& file, std::map<std::string, std::string>& out) {
  int line_number = 0;
  for (std::string_view line : split(file.text, '\n')) {
    ++line_number;
    std::string_view content = trim(line);
    if (content.empty() || content.front() == '#') continue;
    size_t eq = content.find('=');
    std::string_view name = eq == std::string_view::npos ? content : trim(content.substr(0, eq));
    bool valid_name = !name.empty() && !std::isdigit(static_cast<unsigned char>(name.front())) &&
                      std::all_of(name.begin(), name.end(), [](char c) {
                        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                      });
    if (eq == std::string_view::npos || !valid_name) {
      return invalid_argument("{}:{}: expected 'NAME=VALUE', got '{}'", file.path, line_number,
                              content);
    }
    out[std::string(name)] = std::string(content.substr(eq + 1));
  }
  return ok_status();
}

StatusOr<std::vector<std::string>> split_shell_words(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else if (c == '\'') {
      size_t close = text.find('\'', i + 1);
      if (close == std::string_view::npos) {
        return invalid_argument("--launcher_args '{}': unterminated single quote", text);
      }
      word.append(text.substr(i + 1, close - i - 1));
      i = close;
      in_word = true;
    } else if (c == '"') {
      size_t j = i + 1;
      for (; j < text.size() && text[j] != '"'; ++j) {
        // Inside double quotes a backslash escapes only \ " $ `.
        if (text[j] == '\\' && j + 1 < text.size() && std::strchr("\\\"$`", text[j + 1])) ++j;
        word.push_back(text[j]);
      }
      if (j == text.size()) {
        return invalid_argument("--launcher_args '{}': unterminated double quote", text);
      }
      i = j;
      in_word = true;
    } else if (c == '\\' && i + 1 < text.size()) {
      word.push_back(text[++i]);
      in_word = true;
    } else {
      word.push_back(c);
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

std::string shell_quote(std::string_view word) {
  bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("@%+=:,./_-^", c);
  });
  if (plain) return std::string(word);
  std::string quoted = "'";
  for (char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted.push_back(c);
    }
  }
  return quoted + "'";
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& word : argv) {
    if (!line.empty()) line.push_back(' ');
    line += shell_quote(word);
  }
  return line;
}

namespace {

// The resources when there is no hostfile: this machine only, one slot per GPU, or N CPU ranks.
ResourcePool local_pool(const LaunchOptions& options, const LaunchEnvironment& env) {
  int slots = env.local_gpus > 0 ? env.local_gpus : std::max(options.num_gpus, 1);
  HostSlots local{"localhost", {}};
  for (int s = 0; s < slots; ++s) local.slots.push_back(s);
  return {local};
}

// CUDA_VISIBLE_DEVICES for the selected slots when they are not simply 0..k-1 on every host.
// Open MPI's -x gives every rank the same value, so the hosts must agree on the list.
StatusOr<std::optional<std::string>> visible_devices(const ResourcePool& pool) {
  bool all_prefix = std::all_of(pool.begin(), pool.end(),
                                [](const HostSlots& h) { return is_prefix_range(h.slots); });
  if (all_prefix) return std::optional<std::string>();
  for (const HostSlots& h : pool) {
    if (h.slots != pool.front().slots) {
      return unimplemented(
          "hosts select different GPU ids ('{}' uses {}, '{}' uses {}); one CUDA_VISIBLE_DEVICES "
          "is exported to every rank, so select the same slots on every host",
          pool.front().host, describe_slots(pool.front()), h.host, describe_slots(h));
    }
  }
  return std::optional<std::string>(join_ints(pool.front().slots, ","));
}

int total_slots(const ResourcePool& pool) {
  int total = 0;
  for (const HostSlots& h : pool) total += static_cast<int>(h.slots.size());
  return total;
}

Status validate_options(const LaunchOptions& options) {
  if (options.command.empty()) {
    return invalid_argument(
        "no command to run: give it after '--' (zero launch ... -- zero train)");
  }
  if (!options.include.empty() && !options.exclude.empty()) {
    return invalid_argument("--include and --exclude are mutually exclusive");
  }
  if ((options.num_nodes != -1 || options.num_gpus != -1) &&
      (!options.include.empty() || !options.exclude.empty())) {
    return invalid_argument("cannot combine --num_nodes/--num_gpus with --include/--exclude");
  }
  if (options.master_port < 1 || options.master_port > 65535) {
    return invalid_argument("--master_port {}: expected 1..65535", options.master_port);
  }
  return ok_status();
}

// srun without a hostfile: Slurm owns the allocation, so node names come only from a bare-host
// --include/--exclude and the counts from --num_nodes/--num_gpus.
Status plan_slurm_without_hostfile(const LaunchOptions& options, const LaunchEnvironment& env,
                                   LaunchPlan& plan, std::vector<std::string>& node_args) {
  int nodes = options.num_nodes > 0 ? options.num_nodes : 1;
  int per_node = options.num_gpus > 0 ? options.num_gpus : std::max(env.local_gpus, 1);
  for (const auto& [flag, spec, srun_flag] :
       {std::tuple{"--include", options.include, "--nodelist"},
        std::tuple{"--exclude", options.exclude, "--exclude"}}) {
    if (spec.empty()) continue;
    ZERO_ASSIGN_OR_RETURN(std::vector<NodeSpec> specs, parse_node_specs(spec, flag));
    std::vector<std::string> hosts;
    for (const NodeSpec& node : specs) {
      if (!node.slots.empty()) {
        return invalid_argument(
            "{} '{}': slot lists need a hostfile with the slurm launcher (Slurm assigns GPUs)",
            flag, spec);
      }
      hosts.push_back(node.host);
    }
    if (srun_flag == std::string("--nodelist")) nodes = static_cast<int>(hosts.size());
    node_args.push_back(fmt::format("{}={}", srun_flag, fmt::join(hosts, ",")));
  }
  plan.world_size = nodes * per_node;
  node_args.insert(node_args.begin(), {"--nodes", std::to_string(nodes), "--ntasks-per-node",
                                       std::to_string(per_node)});
  if (plan.master_addr.empty() && nodes == 1) plan.master_addr = "127.0.0.1";
  return ok_status();
}

}  // namespace

std::string each_rank_log_dir(const LaunchOptions& options, const LaunchEnvironment& env) {
  const std::string& dir = options.each_rank_log_dir;
  if (dir.empty() || dir == "None") return "";
  if (dir.front() == '/' || env.cwd.empty()) return dir;
  return (std::filesystem::path(env.cwd) / dir).lexically_normal().string();
}

namespace {

// The slots to run on (hostfile, --include / --exclude, --num_nodes / --num_gpus; slurm's node
// arguments when it allocates them), the master address and CUDA_VISIBLE_DEVICES.
Status plan_resources(const LaunchOptions& options, const LaunchEnvironment& env, LaunchPlan& plan,
                      std::vector<std::string>& slurm_node_args) {
  const bool local_run = !env.hostfile.has_value();
  if (local_run && options.hostfile_given) {
    return not_found("hostfile {} not found", options.hostfile_path);
  }
  if (options.launcher == LauncherKind::kSlurm && local_run) {
    return plan_slurm_without_hostfile(options, env, plan, slurm_node_args);
  }
  ResourcePool pool;
  if (local_run) {
    if (options.num_nodes > 1) {
      return invalid_argument("--num_nodes {}: no hostfile ({} not found), so only this machine",
                              options.num_nodes, options.hostfile_path);
    }
    pool = local_pool(options, env);
  } else {
    ZERO_ASSIGN_OR_RETURN(pool, parse_hostfile(env.hostfile->text, env.hostfile->path));
  }
  ZERO_ASSIGN_OR_RETURN(pool, filter_resources(pool, options.include, options.exclude));
  ZERO_ASSIGN_OR_RETURN(pool, limit_resources(pool, options.num_nodes, options.num_gpus));
  if (pool.empty()) {
    return invalid_argument("--include/--exclude left no slots to run on");
  }
  plan.resources = std::move(pool);
  plan.world_size = total_slots(plan.resources);
  if (plan.master_addr.empty()) {
    plan.master_addr = plan.resources.size() == 1 ? "127.0.0.1" : plan.resources.front().host;
  }
  // Slots are GPU ids when the hosts have GPUs (a hostfile's hosts are assumed to).
  if (!local_run || env.local_gpus > 0) {
    ZERO_ASSIGN_OR_RETURN(std::optional<std::string> devices, visible_devices(plan.resources));
    if (devices) plan.exports["CUDA_VISIBLE_DEVICES"] = *devices;
  }
  return ok_status();
}

// Exports: .deepspeed_env first (home, then cwd), then what the flags decided; and the variables
// forwarded by name.
Status plan_exports(const LaunchOptions& options, const LaunchEnvironment& env, LaunchPlan& plan) {
  std::map<std::string, std::string> exports;
  for (const TextFile& file : env.deepspeed_env_files) {
    ZERO_RETURN_IF_ERROR(parse_deepspeed_env(file, exports));
  }
  for (auto& [name, value] : plan.exports) exports[name] = value;
  if (!plan.master_addr.empty()) exports["MASTER_ADDR"] = plan.master_addr;
  exports["MASTER_PORT"] = std::to_string(options.master_port);
  plan.exports = std::move(exports);
  for (const auto& [name, value] : env.vars) {
    if (is_forwarded_var(name) && !plan.exports.contains(name)) plan.forwarded_vars.push_back(name);
  }
  return ok_status();
}

// srun's command line up to the user's launcher arguments: the task count, the nodes (from a
// hostfile) and the exports.
StatusOr<std::vector<std::string>> srun_argv(const LaunchPlan& plan, bool local_run,
                                             std::vector<std::string> slurm_node_args) {
  std::vector<std::string> argv = {"srun", "-n", std::to_string(plan.world_size)};
  if (!local_run) {
    std::vector<std::string> hosts;
    for (const HostSlots& h : plan.resources) hosts.push_back(h.host);
    slurm_node_args = {"--nodes", std::to_string(hosts.size()),
                       fmt::format("--nodelist={}", fmt::join(hosts, ","))};
    bool uniform = std::all_of(plan.resources.begin(), plan.resources.end(), [&](auto& h) {
      return h.slots.size() == plan.resources.front().slots.size();
    });
    if (uniform) {
      slurm_node_args.push_back("--ntasks-per-node");
      slurm_node_args.push_back(std::to_string(plan.resources.front().slots.size()));
    }
  }
  argv.insert(argv.end(), slurm_node_args.begin(), slurm_node_args.end());
  // srun --export=ALL already passes the whole environment; add the explicit values.
  std::string export_arg = "--export=ALL";
  for (const auto& [name, value] : plan.exports) {
    if (value.find(',') != std::string::npos) {
      return invalid_argument("export {}='{}': srun --export cannot carry a value with ','", name,
                              value);
    }
    export_arg += fmt::format(",{}={}", name, value);
  }
  argv.push_back(export_arg);
  return argv;
}

// mpirun's command line up to the user's launcher arguments.
std::vector<std::string> mpirun_argv(const LaunchPlan& plan, const LaunchEnvironment& env,
                                     bool local_run) {
  std::vector<std::string> argv = {"mpirun", "-np", std::to_string(plan.world_size)};
  if (!local_run) {
    std::vector<std::string> hosts;
    for (const HostSlots& h : plan.resources) {
      hosts.push_back(fmt::format("{}:{}", h.host, h.slots.size()));
    }
    argv.push_back("--host");
    argv.push_back(fmt::format("{}", fmt::join(hosts, ",")));
  }
  // Open MPI binds each rank to one core by default (np <= 2), which starves OpenMP threads.
  argv.insert(argv.end(), {"--bind-to", "none"});
  if (local_run && plan.world_size > env.local_cores) argv.push_back("--oversubscribe");
  if (env.is_root) argv.push_back("--allow-run-as-root");
  for (const auto& [name, value] : plan.exports) {
    argv.insert(argv.end(), {"-x", fmt::format("{}={}", name, value)});
  }
  for (const std::string& name : plan.forwarded_vars) argv.insert(argv.end(), {"-x", name});
  return argv;
}

// --enable_each_rank_log: a shell on each rank sends the command's stdout and stderr to its own
// file, named by the launcher's rank variable (as DeepSpeed's launch.py names them).
void wrap_rank_logs(const LaunchOptions& options, const LaunchEnvironment& env, LaunchPlan& plan) {
  const std::string log_dir = each_rank_log_dir(options, env);
  if (log_dir.empty()) return;
  const std::string prefix = fmt::format("{}/{}_rank", log_dir, env.start_timestamp);
  plan.rank_log_pattern = prefix + "<N>.log";
  plan.argv.insert(
      plan.argv.end(),
      {"sh", "-c",
       fmt::format("mkdir -p {} && exec \"$@\" >{}\"${{OMPI_COMM_WORLD_RANK:-${{PMI_RANK:-"
                   "${{SLURM_PROCID:-0}}}}}}\".log 2>&1",
                   shell_quote(log_dir), shell_quote(prefix)),
       "zero-rank-log"});
}

}  // namespace

StatusOr<LaunchPlan> build_launch_plan(const LaunchOptions& options, const LaunchEnvironment& env) {
  ZERO_RETURN_IF_ERROR(validate_options(options));
  LaunchPlan plan;
  plan.master_addr = options.master_addr;
  const bool local_run = !env.hostfile.has_value();
  std::vector<std::string> slurm_node_args;
  ZERO_RETURN_IF_ERROR(plan_resources(options, env, plan, slurm_node_args));
  ZERO_RETURN_IF_ERROR(plan_exports(options, env, plan));
  ZERO_ASSIGN_OR_RETURN(std::vector<std::string> launcher_args,
                        split_shell_words(options.launcher_args));
  plan.host_ranks = encode_host_ranks(plan.resources);
  if (options.launcher == LauncherKind::kSlurm) {
    ZERO_ASSIGN_OR_RETURN(plan.argv, srun_argv(plan, local_run, slurm_node_args));
  } else {
    plan.argv = mpirun_argv(plan, env, local_run);
    for (const HostSlots& h : plan.resources) {
      if (!is_local_host(h.host, env)) plan.remote_hosts.push_back(h.host);
    }
    // Other hosts: mpirun starts their daemons through our wrapper around the agent, which names
    // a host whose session ends (a path with a space cannot be an Open MPI agent word).
    if (!plan.remote_hosts.empty()) {
      ZERO_ASSIGN_OR_RETURN(plan.remote_agent, take_rsh_agent(launcher_args, env.vars));
      if (!env.self_exe.empty() && env.self_exe.find(' ') == std::string::npos) {
        plan.argv.insert(plan.argv.end(),
                         {"--mca", "plm_rsh_agent", env.self_exe + " _launch_agent"});
      }
    }
  }
  plan.argv.insert(plan.argv.end(), launcher_args.begin(), launcher_args.end());
  wrap_rank_logs(options, env, plan);
  const size_t command_start = plan.argv.size();
  plan.argv.insert(plan.argv.end(), options.command.begin(), options.command.end());
  // Ranks run the same build as the launcher.
  if (plan.argv[command_start] == "zero" && !env.self_exe.empty()) {
    plan.argv[command_start] = env.self_exe;
  }
  return plan;
}

// ---- the OS side -------------------------------------------------------------------------------

namespace {

// A hostfile or .deepspeed_env: nullopt when there is none; an error when the path is something a
// launcher must not read (a FIFO would block it, a device never end; core/regular_file.h).
StatusOr<std::optional<std::string>> read_text_file(const std::string& path,
                                                    std::string_view what) {
  constexpr uint64_t kMaxTextFileBytes = uint64_t{16} << 20;
  auto text = read_regular_file(path, kMaxTextFileBytes, what);
  if (text.ok()) return std::optional<std::string>(std::move(*text));
  if (text.status().code() == StatusCode::kNotFound) return std::optional<std::string>();
  return text.status();
}

// GPUs the driver reports (/proc/driver/nvidia/gpus/<bus id>, else /dev/nvidiaN).
int count_driver_gpus() {
  namespace fs = std::filesystem;
  std::error_code ec;
  int count = 0;
  if (fs::is_directory("/proc/driver/nvidia/gpus", ec)) {
    for (const auto& entry : fs::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
      (void)entry;
      ++count;
    }
    if (count > 0) return count;
  }
  for (const auto& entry : fs::directory_iterator("/dev", ec)) {
    std::string name = entry.path().filename().string();
    if (name.size() > 6 && name.starts_with("nvidia") && parse_count(name.substr(6))) ++count;
  }
  return count;
}

}  // namespace

StatusOr<LaunchEnvironment> gather_launch_environment(const std::string& hostfile_path) {
  LaunchEnvironment env;
  env.is_root = geteuid() == 0;
  env.local_cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view kv(*entry);
    size_t eq = kv.find('=');
    if (eq != std::string_view::npos) env.vars[std::string(kv.substr(0, eq))] = kv.substr(eq + 1);
  }
  env.local_gpus = count_driver_gpus();
  if (auto it = env.vars.find("CUDA_VISIBLE_DEVICES"); it != env.vars.end() && env.local_gpus > 0) {
    int visible = 0;
    for (std::string_view id : split(it->second, ',')) {
      if (trim(id).empty() || trim(id).starts_with("-")) break;  // CUDA stops at an invalid id
      ++visible;
    }
    env.local_gpus = std::min(env.local_gpus, visible);
  }
  std::error_code ec;
  env.cwd = std::filesystem::current_path(ec).string();
  {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d%H%M%S", &local);
    env.start_timestamp = stamp;
  }
  if (auto it = env.vars.find("HOME"); it != env.vars.end()) env.home = it->second;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) env.hostname = host;
  env.self_exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();

  ZERO_ASSIGN_OR_RETURN(auto hostfile, read_text_file(hostfile_path, "a hostfile"));
  if (hostfile) env.hostfile = TextFile{hostfile_path, *hostfile};
  std::string env_name = ".deepspeed_env";
  if (auto it = env.vars.find("DS_ENV_FILE"); it != env.vars.end()) env_name = it->second;
  std::set<std::string> seen;
  for (const std::string& dir : {env.home, env.cwd}) {
    if (dir.empty()) continue;
    std::filesystem::path path = std::filesystem::path(dir) / env_name;
    std::string canonical = std::filesystem::weakly_canonical(path, ec).string();
    if (!seen.insert(canonical).second) continue;
    ZERO_ASSIGN_OR_RETURN(auto text, read_text_file(path.string(), "a .deepspeed_env file"));
    if (text) {
      env.deepspeed_env_files.push_back({path.string(), *text});
    }
  }
  return env;
}

}  // namespace zero::cli
