// The progress-line decision (a terminal this process owns, or plain lines for logs), the
// printer's output in both modes, and the rank-named error line (issue 13 item 18).
#include "runtime/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>

#include <spdlog/spdlog.h>

namespace zero::runtime {
namespace {

std::function<const char*(const char*)> env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

ConsoleFacts terminal() {
  ConsoleFacts f;
  f.stdout_is_tty = true;
  f.term = "xterm-256color";
  return f;
}

TEST(LauncherVariable, NamesTheLauncherThatStartedUs) {
  EXPECT_EQ(launcher_variable(env_of({{"PATH", "/bin"}})), "");
  EXPECT_EQ(launcher_variable(env_of({{"OMPI_COMM_WORLD_SIZE", "2"}})), "OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(launcher_variable(env_of({{"PMI_SIZE", "4"}})), "PMI_SIZE");
  EXPECT_EQ(launcher_variable(env_of({{"PMIX_RANK", "0"}})), "PMIX_RANK");
  EXPECT_EQ(launcher_variable(env_of({{"SLURM_PROCID", "0"}})), "SLURM_PROCID");
  EXPECT_EQ(launcher_variable(env_of({{"ZERO_LAUNCHED", "1"}})), "ZERO_LAUNCHED");
  // Set but empty counts as unset (`export OMPI_COMM_WORLD_SIZE=`).
  EXPECT_EQ(launcher_variable(env_of({{"OMPI_COMM_WORLD_SIZE", ""}})), "");
}

TEST(ProgressMode, LiveLineOnlyOnATerminalWeOwn) {
  EXPECT_EQ(choose_progress_mode(terminal()), ProgressMode::kLiveLine);

  ConsoleFacts redirected = terminal();
  redirected.stdout_is_tty = false;  // `zero train ... > log`
  EXPECT_EQ(choose_progress_mode(redirected), ProgressMode::kPlainLines);

  // Issue 13 item 18: mpirun gives rank 0 a pty even when its own output goes to a file.
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_PROCID", "ZERO_LAUNCHED"}) {
    ConsoleFacts launched = terminal();
    launched.launcher_var = var;
    EXPECT_EQ(choose_progress_mode(launched), ProgressMode::kPlainLines) << var;
  }
  ConsoleFacts two_ranks = terminal();
  two_ranks.world_size = 2;
  EXPECT_EQ(choose_progress_mode(two_ranks), ProgressMode::kPlainLines);
  ConsoleFacts quiet = terminal();
  quiet.quiet = true;
  EXPECT_EQ(choose_progress_mode(quiet), ProgressMode::kPlainLines);
  ConsoleFacts dumb = terminal();
  dumb.term = "dumb";
  EXPECT_EQ(choose_progress_mode(dumb), ProgressMode::kPlainLines);
}

TEST(RankErrorLine, NamesTheRankOnceWhenThereAreSeveral) {
  EXPECT_EQ(rank_error_line(0, 1, "bad flag"), "error: bad flag");
  EXPECT_EQ(rank_error_line(0, 2, "bad flag"), "[rank 0] error: bad flag");
  EXPECT_EQ(rank_error_line(1, 2, "bad token"), "[rank 1] error: bad token");
  // A communicator message already naming this rank is not named twice.
  EXPECT_EQ(rank_error_line(1, 2, "rank 1: collective timed out"),
            "[rank 1] error: collective timed out");
  // ... but one naming another rank keeps it.
  EXPECT_EQ(rank_error_line(1, 2, "rank 0 timed out in collective #3"),
            "[rank 1] error: rank 0 timed out in collective #3");
}

// Everything the printer wrote to a temporary file.
class Captured {
 public:
  Captured() : file_(std::tmpfile()) {}
  ~Captured() { std::fclose(file_); }
  std::FILE* file() { return file_; }
  std::string text() {
    std::fflush(file_);
    std::rewind(file_);
    std::string out;
    int c;
    while ((c = std::fgetc(file_)) != EOF) out.push_back(static_cast<char>(c));
    std::fseek(file_, 0, SEEK_END);  // the printer may write again
    return out;
  }

 private:
  std::FILE* file_;
};

TEST(ProgressPrinter, PlainLinesAreWholeLinesWithoutControlCharacters) {
  Captured out;
  {
    ProgressPrinter p(ProgressMode::kPlainLines, out.file());
    p.progress("step 1/4", /*keep=*/false);  // between logging steps: nothing
    p.progress("step 2/4", /*keep=*/true);
    p.message("zero train: saved checkpoint OUT/global_step2");
    p.end_live_line();  // nothing showing: nothing written
    p.progress("step 4/4", /*keep=*/true);
  }
  EXPECT_EQ(out.text(), "step 2/4\nzero train: saved checkpoint OUT/global_step2\nstep 4/4\n");
}

TEST(ProgressPrinter, MessagesNeverGlueOntoTheLiveLine) {
  Captured out;
  {
    ProgressPrinter p(ProgressMode::kLiveLine, out.file());
    p.progress("step 1/4", false);
    p.message("saved");  // starts on a fresh line
    p.progress("step 2/4", true);
    p.message("kept");  // the kept line already ended: no blank line
    p.progress("step 3/4", false);
  }  // the live line still showing is ended
  EXPECT_EQ(out.text(), "\r\033[Kstep 1/4\nsaved\n\r\033[Kstep 2/4\nkept\n\r\033[Kstep 3/4\n");
}

TEST(ProgressPrinter, SpdlogMessagesStartOnAFreshLine) {
  const size_t sinks_before = spdlog::default_logger()->sinks().size();
  Captured out;
  {
    ProgressPrinter p(ProgressMode::kLiveLine, out.file());
    p.progress("step 1/4", false);
    spdlog::warn("overflow: skipping step");  // e.g. the engine's fp16 overflow line
    EXPECT_EQ(out.text(), "\r\033[Kstep 1/4\n");
    spdlog::warn("a second message");  // no live line: nothing more
    EXPECT_EQ(out.text(), "\r\033[Kstep 1/4\n");
  }
  EXPECT_EQ(spdlog::default_logger()->sinks().size(), sinks_before);
}

}  // namespace
}  // namespace zero::runtime
