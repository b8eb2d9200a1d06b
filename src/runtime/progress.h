// Rank 0's console during training: a live progress line rewritten in place only on a terminal
// this process owns, whole lines otherwise (logs under mpirun / srun / zero launch), messages that
// never glue onto a live line, and errors printed once, named by rank.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace spdlog::sinks {
class sink;
}  // namespace spdlog::sinks

namespace zero::runtime {

// The launcher variable set in this environment, or "" when none: OMPI_COMM_WORLD_SIZE (Open MPI's
// mpirun), PMI_SIZE / PMIX_RANK (MPICH / Intel MPI / PMIx launchers), SLURM_PROCID (srun),
// ZERO_LAUNCHED (zero launch). Under any of them stdout is the launcher's pipe or pty, forwarded
// to a terminal or a file this process cannot see (mpirun hands ranks a pty even when its own
// output goes to a file).
std::string launcher_variable(const std::function<const char*(const char*)>& get_env);

// What decides how progress is shown.
struct ConsoleFacts {
  bool stdout_is_tty = false;  // isatty(STDOUT_FILENO)
  std::string launcher_var;    // launcher_variable(): empty when started directly
  std::string term;            // $TERM ("dumb" cannot rewrite a line)
  int world_size = 1;
  bool quiet = false;  // --quiet
};

// The facts of this process: isatty(stdout), getenv.
ConsoleFacts console_facts_of_this_process(int world_size, bool quiet);

enum class ProgressMode {
  kLiveLine,    // "\r\033[K" rewrites one line every step; kept lines end with "\n"
  kPlainLines,  // one whole line per logging step, nothing else
};

// kLiveLine only when stdout is a terminal this process owns: a tty, no launcher variable, one
// rank, a TERM that can rewrite a line, and not --quiet.
ProgressMode choose_progress_mode(const ConsoleFacts& facts);

// The error line of a failed rank: "error: MSG" alone, "[rank R] error: MSG" when world_size > 1
// (a leading "rank R: " naming this same rank is dropped, not repeated).
std::string rank_error_line(int rank, int world_size, std::string_view message);

// Writes rank 0's progress and messages to `out` (stdout). In kLiveLine mode it also breaks the
// live line before any spdlog message (the engine's overflow warnings) for its lifetime. Not
// thread-safe: the training thread only.
class ProgressPrinter {
 public:
  ProgressPrinter(ProgressMode mode, std::FILE* out);
  ~ProgressPrinter();  // ends a live line still showing; unhooks spdlog
  ProgressPrinter(const ProgressPrinter&) = delete;
  ProgressPrinter& operator=(const ProgressPrinter&) = delete;

  ProgressMode mode() const { return mode_; }
  // One step's progress. kLiveLine: rewrites the live line, and keeps it (ends it with "\n") when
  // `keep`. kPlainLines: printed as a whole line only when `keep`.
  void progress(std::string_view line, bool keep);
  // Any other message for stdout: a whole line, always starting on a fresh line.
  void message(std::string_view line);
  // Before writing elsewhere (stderr): moves off a live line still showing, so what follows starts
  // on a fresh line.
  void end_live_line();

  struct LiveState;  // shared with the spdlog hook

 private:
  ProgressMode mode_;
  std::shared_ptr<LiveState> state_;
  std::shared_ptr<spdlog::sinks::sink>
      spdlog_hook_;  // the sink inserted into spdlog's default logger
};

}  // namespace zero::runtime
