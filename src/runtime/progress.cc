// Rank 0's console: live line or plain lines, and errors named by rank (see progress.h).
#include "runtime/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

namespace zero::runtime {

struct ProgressPrinter::LiveState {
  std::FILE* out = nullptr;
  bool showing = false;  // a live line is on screen without its "\n"

  void end() {
    if (!showing) return;
    std::fputc('\n', out);
    std::fflush(out);
    showing = false;
  }
};

namespace {

// Placed first in spdlog's default logger: a message arriving while a live line shows starts on a
// fresh line instead of being glued to the line.
class LiveLineBreakSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit LiveLineBreakSink(std::shared_ptr<ProgressPrinter::LiveState> state)
      : state_(std::move(state)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg&) override { state_->end(); }
  void flush_() override {}

 private:
  std::shared_ptr<ProgressPrinter::LiveState> state_;
};

}  // namespace

std::string launcher_variable(const std::function<const char*(const char*)>& get_env) {
  static constexpr const char* kVars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                          "SLURM_PROCID", "ZERO_LAUNCHED"};
  for (const char* name : kVars) {
    const char* v = get_env(name);
    if (v != nullptr && *v != '\0') return name;
  }
  return "";
}

ConsoleFacts console_facts_of_this_process(int world_size, bool quiet) {
  ConsoleFacts f;
  f.stdout_is_tty = isatty(STDOUT_FILENO) == 1;
  f.launcher_var = launcher_variable([](const char* name) { return std::getenv(name); });
  const char* term = std::getenv("TERM");
  f.term = term != nullptr ? term : "";
  f.world_size = world_size;
  f.quiet = quiet;
  return f;
}

ProgressMode choose_progress_mode(const ConsoleFacts& facts) {
  const bool own_terminal = facts.stdout_is_tty && facts.launcher_var.empty() &&
                            facts.world_size == 1 && facts.term != "dumb";
  return own_terminal && !facts.quiet ? ProgressMode::kLiveLine : ProgressMode::kPlainLines;
}

std::string rank_error_line(int rank, int world_size, std::string_view message) {
  if (world_size <= 1) return fmt::format("error: {}", message);
  const std::string own = fmt::format("rank {}: ", rank);
  if (message.starts_with(own)) message.remove_prefix(own.size());
  return fmt::format("[rank {}] error: {}", rank, message);
}

ProgressPrinter::ProgressPrinter(ProgressMode mode, std::FILE* out)
    : mode_(mode), state_(std::make_shared<LiveState>()) {
  state_->out = out;
  if (mode_ == ProgressMode::kLiveLine) {
    auto sink = std::make_shared<LiveLineBreakSink>(state_);
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.insert(sinks.begin(), sink);
    spdlog_hook_ = sink;
  }
}

ProgressPrinter::~ProgressPrinter() {
  if (spdlog_hook_) {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove_if(sinks.begin(), sinks.end(),
                               [&](const spdlog::sink_ptr& s) { return s == spdlog_hook_; }),
                sinks.end());
  }
  state_->end();
}

void ProgressPrinter::progress(std::string_view line, bool keep) {
  std::FILE* out = state_->out;
  if (mode_ == ProgressMode::kLiveLine) {
    fmt::print(out, "\r\033[K{}{}", line, keep ? "\n" : "");
    state_->showing = !keep;
  } else if (keep) {
    fmt::print(out, "{}\n", line);
  }
  std::fflush(out);
}

void ProgressPrinter::message(std::string_view line) {
  state_->end();
  fmt::print(state_->out, "{}\n", line);
  std::fflush(state_->out);
}

void ProgressPrinter::end_live_line() { state_->end(); }

}  // namespace zero::runtime
