// Multi-host launching through Open MPI's remote agent: see remote_agent.h.
#include "cli/remote_agent.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

extern char** environ;

namespace zero::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// "exit status 255", "killed by signal 9 (Killed)".
std::string describe_wait_status(int wait_status) {
  if (WIFEXITED(wait_status)) return fmt::format("exit status {}", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return fmt::format("killed by signal {} ({})", WTERMSIG(wait_status),
                       strsignal(WTERMSIG(wait_status)));
  }
  return "ended";
}

// The last non-empty line of a process's output, for messages.
std::string last_line(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.remove_suffix(1);
  }
  size_t nl = text.rfind('\n');
  return std::string(nl == std::string_view::npos ? text : text.substr(nl + 1));
}

std::vector<char*> c_argv(const std::vector<std::string>& argv) {
  std::vector<char*> out;
  for (const std::string& arg : argv) out.push_back(const_cast<char*>(arg.c_str()));
  out.push_back(nullptr);
  return out;
}

std::string basename_of(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

// Each "host=ranks" entry of "node1=0-3,node2=5" in order, as (host, ranks); stops when `fn`
// returns true.
template <typename Fn>
void for_each_host_entry(std::string_view encoded, Fn&& fn) {
  while (!encoded.empty()) {
    const size_t end = encoded.find(',');
    const std::string_view entry = encoded.substr(0, end);
    const size_t eq = entry.rfind('=');
    if (eq != std::string_view::npos && fn(entry.substr(0, eq), entry.substr(eq + 1))) return;
    if (end == std::string_view::npos) return;
    encoded.remove_prefix(end + 1);
  }
}

}  // namespace

bool is_rsh_agent_param(std::string_view name) {
  return name == "plm_rsh_agent" || name == "orte_rsh_agent" || name == "pls_rsh_agent";
}

StatusOr<std::vector<std::string>> take_rsh_agent(std::vector<std::string>& launcher_args,
                                                  const std::map<std::string, std::string>& vars) {
  std::string agent;
  for (size_t i = 0; i < launcher_args.size();) {
    const std::string& word = launcher_args[i];
    if ((word == "--mca" || word == "-mca") && i + 1 < launcher_args.size() &&
        is_rsh_agent_param(launcher_args[i + 1])) {
      if (i + 2 >= launcher_args.size()) {
        return invalid_argument("--launcher_args: '{} {}' without a value", word,
                                launcher_args[i + 1]);
      }
      agent = launcher_args[i + 2];
      launcher_args.erase(launcher_args.begin() + i, launcher_args.begin() + i + 3);
      continue;
    }
    ++i;
  }
  if (agent.empty()) {
    for (const char* name : {"OMPI_MCA_plm_rsh_agent", "OMPI_MCA_orte_rsh_agent"}) {
      if (auto it = vars.find(name); it != vars.end() && !it->second.empty()) {
        agent = it->second;
        break;
      }
    }
  }
  if (agent.empty()) agent = "ssh";
  agent = agent.substr(0, agent.find(':'));  // Open MPI's "ssh : rsh": the first that exists
  ZERO_ASSIGN_OR_RETURN(std::vector<std::string> words, split_shell_words(agent));
  if (words.empty()) return invalid_argument("the remote agent '{}' is empty", agent);
  return words;
}

bool is_local_host(const std::string& host, const LaunchEnvironment& env) {
  if (host == "localhost" || host == "127.0.0.1" || host == "::1") return true;
  if (env.hostname.empty()) return false;
  if (host == env.hostname) return true;
  // The short name of this machine's fully qualified name, or the reverse.
  std::string_view mine = env.hostname;
  std::string_view theirs = host;
  return mine.substr(0, mine.find('.')) == theirs.substr(0, theirs.find('.')) &&
         (mine.find('.') == std::string_view::npos || theirs.find('.') == std::string_view::npos);
}

std::string encode_host_ranks(const ResourcePool& pool) {
  std::string out;
  int rank = 0;
  for (const HostSlots& h : pool) {
    if (h.slots.empty()) continue;
    const int first = rank;
    rank += static_cast<int>(h.slots.size());
    if (!out.empty()) out += ',';
    out += rank - 1 == first ? fmt::format("{}={}", h.host, first)
                             : fmt::format("{}={}-{}", h.host, first, rank - 1);
  }
  return out;
}

std::string ranks_of_host(std::string_view encoded, std::string_view host) {
  std::string ranks;
  for_each_host_entry(encoded, [&](std::string_view h, std::string_view r) {
    if (h != host) return false;
    ranks = r;
    return true;
  });
  return ranks;
}

std::string host_of_rank(std::string_view encoded, int rank) {
  std::string host;
  for_each_host_entry(encoded, [&](std::string_view h, std::string_view range) {
    const size_t dash = range.find('-');
    const int first = std::atoi(std::string(range.substr(0, dash)).c_str());
    const int last = dash == std::string_view::npos
                         ? first
                         : std::atoi(std::string(range.substr(dash + 1)).c_str());
    if (rank < first || rank > last) return false;
    host = h;
    return true;
  });
  return host;
}

std::vector<std::string> agent_liveness_options(const std::vector<std::string>& agent) {
  if (agent.empty() || basename_of(agent.front()) != "ssh") return {};
  return {"-o", "BatchMode=yes", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"};
}

Status check_hosts_reachable(const std::vector<std::string>& agent,
                             const std::vector<std::string>& hosts, std::string_view host_ranks,
                             int timeout_s) {
  struct Probe {
    std::string host;
    pid_t pid = -1;
    int fd = -1;
    std::string output;
    std::string failure;  // empty: answered
    bool done = false;
  };
  std::vector<Probe> probes;
  for (const std::string& host : hosts) {
    Probe probe;
    probe.host = host;
    std::vector<std::string> argv = agent;
    for (const std::string& word : agent_liveness_options(agent)) argv.push_back(word);
    if (basename_of(agent.front()) == "ssh") {
      argv.insert(argv.end(), {"-o", fmt::format("ConnectTimeout={}", timeout_s)});
    }
    argv.insert(argv.end(), {host, "true"});
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return io_error("pipe: {}", std::strerror(errno));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
    auto args = c_argv(argv);
    int rc = posix_spawnp(&probe.pid, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    probe.fd = fds[0];
    if (rc != 0) {
      close(probe.fd);
      probe.fd = -1;
      probe.done = true;
      probe.failure = fmt::format("cannot start '{}': {}", agent.front(), std::strerror(rc));
    }
    probes.push_back(std::move(probe));
  }
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  auto pending = [&] {
    return std::any_of(probes.begin(), probes.end(), [](const Probe& p) { return !p.done; });
  };
  while (pending() && Clock::now() < deadline) {
    std::vector<pollfd> fds;
    for (const Probe& p : probes) {
      if (p.fd >= 0) fds.push_back({p.fd, POLLIN, 0});
    }
    if (!fds.empty())
      poll(fds.data(), fds.size(), 100);
    else
      usleep(100'000);
    for (Probe& p : probes) {
      if (p.fd >= 0) {
        char buf[4096];
        pollfd one{p.fd, POLLIN, 0};
        while (poll(&one, 1, 0) > 0) {
          ssize_t n = read(p.fd, buf, sizeof buf);
          if (n <= 0) {
            close(p.fd);
            p.fd = -1;
            break;
          }
          if (p.output.size() < 65536) p.output.append(buf, static_cast<size_t>(n));
        }
      }
      if (p.done) continue;
      int wait_status = 0;
      if (waitpid(p.pid, &wait_status, WNOHANG) == p.pid) {
        p.done = true;
        if (!(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0)) {
          p.failure = describe_wait_status(wait_status);
        }
      }
    }
  }
  for (Probe& p : probes) {
    if (!p.done) {
      kill(p.pid, SIGKILL);
      waitpid(p.pid, nullptr, 0);
      p.failure = fmt::format("no answer within {} s", timeout_s);
    }
    if (p.fd >= 0) close(p.fd);
  }
  std::vector<std::string> failed;
  for (const Probe& p : probes) {
    if (p.failure.empty()) continue;
    std::string said = last_line(p.output);
    failed.push_back(fmt::format("{} (ranks {}): {}{}", p.host, ranks_of_host(host_ranks, p.host),
                                 p.failure, said.empty() ? "" : fmt::format(": \"{}\"", said)));
  }
  if (failed.empty()) return ok_status();
  return failed_precondition(
      "{} of {} hosts did not answer '{} HOST true', so no rank was started:\n  {}\n(check that "
      "the host is up and reachable and that '{}' logs in without a password; --no_ssh_check "
      "skips this check)",
      failed.size(), hosts.size(), shell_join(agent), fmt::join(failed, "\n  "), agent.front());
}

int run_launch_agent(int argc, char** argv) {
  std::vector<std::string> args(argv + std::min(argc, 2), argv + argc);
  const char* agent_text = std::getenv("ZERO_LAUNCH_AGENT");
  auto agent = split_shell_words(agent_text != nullptr && *agent_text != 0 ? agent_text : "ssh");
  if (!agent.ok() || agent->empty()) {
    std::fprintf(stderr, "zero launch: bad ZERO_LAUNCH_AGENT '%s'\n", agent_text);
    return 255;
  }
  std::vector<std::string> command = *agent;
  for (const std::string& word : agent_liveness_options(*agent)) command.push_back(word);
  command.insert(command.end(), args.begin(), args.end());
  std::string host = "?";
  for (const std::string& arg : args) {
    if (!arg.empty() && arg.front() != '-') {
      host = arg;
      break;
    }
  }

  // If mpirun dies (SIGKILL), its agents must not live on holding their sessions.
  const pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) return 255;

  sigset_t wait_set, old_mask;
  sigemptyset(&wait_set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&wait_set, sig);
  pthread_sigmask(SIG_BLOCK, &wait_set, &old_mask);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setsigmask(&attr, &old_mask);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  auto cargs = c_argv(command);
  pid_t child = 0;
  const auto start = Clock::now();
  int rc = posix_spawnp(&child, cargs[0], nullptr, &attr, cargs.data(), environ);
  posix_spawnattr_destroy(&attr);
  const char* host_ranks = std::getenv("ZERO_LAUNCH_HOST_RANKS");
  std::string ranks = ranks_of_host(host_ranks != nullptr ? host_ranks : "", host);
  if (ranks.empty()) ranks = "?";
  if (rc != 0) {
    std::fprintf(stderr,
                 "zero launch: lost host %s (ranks %s): cannot start its remote agent '%s': %s\n",
                 host.c_str(), ranks.c_str(), command.front().c_str(), std::strerror(rc));
    return 255;
  }
  bool asked_to_stop = false;
  int wait_status = 0;
  while (true) {
    pid_t done = waitpid(child, &wait_status, WNOHANG);
    if (done == child) break;
    if (done < 0 && errno != EINTR) return 255;
    siginfo_t info;
    timespec timeout{0, 200'000'000};
    int sig = sigtimedwait(&wait_set, &info, &timeout);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      asked_to_stop = true;
      kill(child, sig);
    }
  }
  const bool failed = !(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0);
  if (failed && !asked_to_stop) {
    std::fprintf(stderr,
                 "zero launch: lost host %s (ranks %s) after %.1f s: its session through '%s' "
                 "ended (%s); Open MPI's messages about a daemon that failed to start or lost "
                 "contact refer to this host\n",
                 host.c_str(), ranks.c_str(), seconds_since(start), shell_join(*agent).c_str(),
                 describe_wait_status(wait_status).c_str());
  }
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  return 128 + (WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : 0);
}

}  // namespace zero::cli
