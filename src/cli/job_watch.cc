// Watching a launched job's stderr for failures: see job_watch.h.
#include "cli/job_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <regex>

#include <fmt/format.h>

#include "cli/remote_agent.h"

extern char** environ;

namespace zero::cli {
namespace {

const std::regex& lost_host_re() {
  static const std::regex re(R"(zero launch: lost host (\S+))");
  return re;
}
const std::regex& silent_ranks_re() {
  static const std::regex re(R"(rank\(s\) that did not reach it: ([0-9][0-9, ]*))");
  return re;
}
const std::regex& abort_re() {
  static const std::regex re(R"(MPI_ABORT was invoked on rank (\d+))");
  return re;
}
const std::regex& noticed_re() {
  static const std::regex re(
      R"(mpirun noticed that process rank (\d+) with PID \d+ on node (\S+))");
  return re;
}

// Lines that mean the job is failing although they name no rank or host of their own.
bool is_failure_line(std::string_view line) {
  static constexpr const char* kMarkers[] = {
      "ORTE was unable to reliably start one or more daemons",
      "ORTE has lost communication with a remote daemon",
      "mpirun detected that one or more processes exited with non-zero status",
      "Primary job  terminated normally, but",
      "mpirun noticed that process rank",
      "MPI_ABORT was invoked",
      "zero launch: lost host",
  };
  for (const char* marker : kMarkers) {
    if (line.find(marker) != std::string_view::npos) return true;
  }
  // A rank's own error line: "[rank 3] error: ..." or "error: ..." (one rank).
  if (line.starts_with("error: ")) return true;
  if (line.starts_with("[rank ")) {
    size_t close = line.find("] ");
    return close != std::string_view::npos && line.substr(close + 2).starts_with("error:");
  }
  return false;
}

}  // namespace

bool FailureScanner::feed(std::string_view line) {
  const std::string text(line);
  std::smatch m;
  if (std::regex_search(text, m, lost_host_re())) {
    std::string host = m[1].str();
    if (std::find(lost_hosts_.begin(), lost_hosts_.end(), host) == lost_hosts_.end()) {
      lost_hosts_.push_back(host);
    }
  }
  if (std::regex_search(text, m, silent_ranks_re())) {
    std::string list = m[1].str();
    size_t pos = 0;
    while (pos < list.size()) {
      size_t end = list.find(',', pos);
      std::string item = list.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
      item.erase(std::remove(item.begin(), item.end(), ' '), item.end());
      if (!item.empty()) {
        int rank = std::atoi(item.c_str());
        if (std::find(silent_ranks_.begin(), silent_ranks_.end(), rank) == silent_ranks_.end()) {
          silent_ranks_.push_back(rank);
        }
      }
      if (end == std::string::npos) break;
      pos = end + 1;
    }
  }
  if (first_error_rank_ < 0 && line.starts_with("[rank ")) {
    size_t close = line.find("] error: ");
    if (close != std::string_view::npos) {
      first_error_rank_ = std::atoi(text.c_str() + 6);
      first_error_ = text.substr(close + 9);
    }
  }
  if (aborting_rank_ < 0 && std::regex_search(text, m, abort_re())) {
    aborting_rank_ = std::atoi(m[1].str().c_str());
  }
  if (aborting_rank_ < 0 && std::regex_search(text, m, noticed_re())) {
    aborting_rank_ = std::atoi(m[1].str().c_str());
  }
  if (first_failure_.empty() && is_failure_line(line)) {
    first_failure_ = text;
    return true;
  }
  return false;
}

std::string FailureScanner::describe_rank(int rank) const {
  std::string host = host_of_rank(host_ranks_, rank);
  return host.empty() ? std::to_string(rank) : fmt::format("{} (on {})", rank, host);
}

std::string FailureScanner::summary() const {
  std::vector<std::string> parts;
  for (const std::string& host : lost_hosts_) {
    std::string ranks = ranks_of_host(host_ranks_, host);
    parts.push_back(ranks.empty() ? fmt::format("host {} was lost", host)
                                  : fmt::format("host {} (ranks {}) was lost", host, ranks));
  }
  if (!silent_ranks_.empty()) {
    std::vector<std::string> ranks;
    for (int rank : silent_ranks_) ranks.push_back(describe_rank(rank));
    parts.push_back(fmt::format("rank(s) {} did not answer", fmt::join(ranks, ", ")));
  }
  if (parts.empty() && first_error_rank_ >= 0) {
    parts.push_back(fmt::format("rank {}: {}", describe_rank(first_error_rank_), first_error_));
  }
  if (parts.empty() && aborting_rank_ >= 0) {
    parts.push_back(fmt::format("rank {} failed first", describe_rank(aborting_rank_)));
  }
  if (parts.empty()) return first_failure_;
  return fmt::format("{}", fmt::join(parts, "; "));
}

StatusOr<int> run_and_watch(const std::vector<std::string>& argv, const WatchOptions& options) {
  using Clock = std::chrono::steady_clock;
  sigset_t wait_set, old_mask;
  sigemptyset(&wait_set);
  sigaddset(&wait_set, SIGINT);
  sigaddset(&wait_set, SIGTERM);
  sigaddset(&wait_set, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &wait_set, &old_mask);
  auto restore = [&] { pthread_sigmask(SIG_SETMASK, &old_mask, nullptr); };
  const int sig_fd = signalfd(-1, &wait_set, SFD_CLOEXEC | SFD_NONBLOCK);
  int fds[2];
  if (sig_fd < 0 || pipe2(fds, O_CLOEXEC) != 0) {
    if (sig_fd >= 0) close(sig_fd);
    restore();
    return io_error("cannot watch '{}': {}", argv[0], std::strerror(errno));
  }

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setsigmask(&attr, &old_mask);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  std::vector<char*> c_argv;
  for (const std::string& arg : argv) c_argv.push_back(const_cast<char*>(arg.c_str()));
  c_argv.push_back(nullptr);
  pid_t child = 0;
  int spawn_error = posix_spawnp(&child, c_argv[0], &actions, &attr, c_argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  const int err_fd = fds[0];
  if (spawn_error != 0) {
    close(err_fd);
    close(sig_fd);
    restore();
    return io_error("cannot start '{}': {}", argv[0], std::strerror(spawn_error));
  }
  fcntl(err_fd, F_SETFL, O_NONBLOCK);

  FailureScanner scanner(options.host_ranks);
  std::string pending;  // a partial line
  auto consume = [&](const char* data, size_t n) {
    for (size_t done = 0; done < n;) {  // pass it on at once, as mpirun wrote it
      ssize_t w = write(2, data + done, n - done);
      if (w <= 0) break;
      done += static_cast<size_t>(w);
    }
    pending.append(data, n);
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      scanner.feed(std::string_view(pending).substr(start, nl - start));
    }
    pending.erase(0, start);
    if (pending.size() > 65536) pending.clear();  // a runaway line: scanning it is no use
  };
  auto drain = [&] {
    char buf[8192];
    ssize_t n;
    while ((n = read(err_fd, buf, sizeof buf)) > 0) consume(buf, static_cast<size_t>(n));
  };

  std::optional<Clock::time_point> failed_at;
  bool termed = false, killed = false;
  int wait_status = 0;
  bool err_open = true;
  while (true) {
    pid_t done = waitpid(child, &wait_status, WNOHANG);
    if (done == child) break;
    pollfd pfds[2] = {{sig_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    poll(pfds, err_open ? 2 : 1, 200);
    signalfd_siginfo info;
    while (read(sig_fd, &info, sizeof info) == sizeof info) {
      const int sig = static_cast<int>(info.ssi_signo);
      // A terminal's Ctrl-C already reached the child through the process group (SI_KERNEL).
      if ((sig == SIGINT || sig == SIGTERM) && info.ssi_code != SI_KERNEL) kill(child, sig);
    }
    if (err_open && (pfds[1].revents & (POLLIN | POLLHUP))) {
      char buf[8192];
      ssize_t n = read(err_fd, buf, sizeof buf);
      if (n > 0) {
        consume(buf, static_cast<size_t>(n));
      } else if (n == 0) {
        err_open = false;
      }
    }
    if (!failed_at && scanner.failed()) failed_at = Clock::now();
    if (failed_at) {
      const double waited = std::chrono::duration<double>(Clock::now() - *failed_at).count();
      if (!termed && waited > options.abort_grace_s) {
        std::fprintf(stderr,
                     "zero launch: the job is still running %.0f s after its first failure (Open "
                     "MPI waits for a host it cannot reach); stopping it\n",
                     options.abort_grace_s);
        kill(child, SIGTERM);
        termed = true;
      } else if (termed && !killed && waited > options.abort_grace_s + 3) {
        kill(child, SIGKILL);
        killed = true;
      }
    }
  }
  drain();  // what is left; not to EOF, since orphaned agents may still hold the pipe
  if (!pending.empty()) scanner.feed(pending);
  close(err_fd);
  close(sig_fd);
  restore();
  int status = WIFEXITED(wait_status)     ? WEXITSTATUS(wait_status)
               : WIFSIGNALED(wait_status) ? 128 + WTERMSIG(wait_status)
                                          : 1;
  if (status != 0 && scanner.failed()) {
    std::fprintf(stderr, "zero launch: the job failed (exit status %d): %s\n", status,
                 scanner.summary().c_str());
  }
  return status;
}

}  // namespace zero::cli
